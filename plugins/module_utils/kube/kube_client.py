# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""A client of the Kubernetes API from the options of the ``kilo.mesh.kubernetes`` doc fragment.

Options not given come from the ``K8S_AUTH_*`` environment variables. Then: O(host) with
O(api_key) needs no config file; O(kubeconfig) or O(context) reads that config file; with none
of these, the in-cluster configuration (running in a pod) or else the default config file.
O(host), O(api_key), O(validate_certs) and O(ca_cert) override what was loaded. Each call
builds its own configuration: the client library's global default is never changed.

The ``kubernetes`` library is optional: ``HAS_KUBERNETES`` and ``KUBERNETES_IMPORT_ERROR``
let a module call ``missing_required_lib('kubernetes')`` and a plugin raise a clear error.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import traceback

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, to_bool

try:
    import kubernetes
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None

# Option -> environment variable (the names kubernetes.core uses).
ENV = {
    "kubeconfig": "K8S_AUTH_KUBECONFIG",
    "context": "K8S_AUTH_CONTEXT",
    "host": "K8S_AUTH_HOST",
    "api_key": "K8S_AUTH_API_KEY",
    "validate_certs": "K8S_AUTH_VERIFY_SSL",
    "ca_cert": "K8S_AUTH_SSL_CA_CERT",
    "client_cert": "K8S_AUTH_CERT_FILE",
    "client_key": "K8S_AUTH_KEY_FILE",
    "proxy": "K8S_AUTH_PROXY",
    "no_proxy": "K8S_AUTH_NO_PROXY",
    "impersonate_user": "K8S_AUTH_IMPERSONATE_USER",
    "impersonate_groups": "K8S_AUTH_IMPERSONATE_GROUPS",
}
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
PAGE = 500


class KubeError(KiloError):
    """A failed call to the API; ``status`` is the HTTP status (None when the server was not reached)."""

    def __init__(self, message, subject=None, field=None, status=None):
        super(KubeError, self).__init__(message, subject, field)
        self.status = status


def auth_options(options=None, environ=None):
    """The client options given, each missing one from its environment variable."""
    environ = os.environ if environ is None else environ
    options = options or {}
    auth = {}
    for name, var in ENV.items():
        value = options.get(name)
        if value in (None, ""):
            value = environ.get(var) or None
        auth[name] = value
    if auth["validate_certs"] is not None:
        auth["validate_certs"] = to_bool(auth["validate_certs"], "kubernetes", "validate_certs")
    for name in ("kubeconfig", "ca_cert", "client_cert", "client_key"):
        if auth[name]:
            auth[name] = os.path.expanduser(auth[name])
    if isinstance(auth["impersonate_groups"], str):  # K8S_AUTH_IMPERSONATE_GROUPS: Group1,Group2
        auth["impersonate_groups"] = [
            g.strip() for g in auth["impersonate_groups"].split(",") if g.strip()
        ]
    return auth


def in_cluster(environ=None):
    """Whether this runs in a pod: the service host variable and the token file are there."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and os.path.isfile(SERVICE_ACCOUNT_TOKEN)


def default_kubeconfig():
    """The client library's default config file ($KUBECONFIG's first, else ~/.kube/config) when it exists."""
    path = os.path.expanduser(
        os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
    )
    return path if os.path.exists(path) else None


def _require():
    if not HAS_KUBERNETES:
        raise KubeError(
            "the Python library 'kubernetes' is needed on the controller (pip install kubernetes): %s"
            % KUBERNETES_IMPORT_ERROR.strip().splitlines()[-1]
        )


def configuration(options=None):
    """A ``kubernetes.client.Configuration`` from the options (see the module docstring)."""
    _require()
    auth = auth_options(options)
    cfg = kubernetes.client.Configuration()
    try:
        if auth["host"] and (auth["api_key"] or auth["client_cert"]):
            pass
        elif auth["kubeconfig"] or auth["context"]:
            kubernetes.config.load_kube_config(
                config_file=auth["kubeconfig"],
                context=auth["context"],
                client_configuration=cfg,
                persist_config=False,
            )
        elif in_cluster():
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        elif default_kubeconfig():
            kubernetes.config.load_kube_config(client_configuration=cfg, persist_config=False)
        elif not auth["host"]:
            raise KubeError(
                "no Kubernetes client configuration: give kubeconfig, or host and api_key"
                " (or their K8S_AUTH_* environment variables)"
            )
    except (kubernetes.config.ConfigException, OSError, ValueError) as e:
        raise KubeError(
            "cannot load the client configuration: %s" % e,
            "kubernetes",
            "kubeconfig" if auth["kubeconfig"] else None,
        )
    if auth["host"]:
        cfg.host = auth["host"].rstrip("/")
    if auth["api_key"]:
        cfg.api_key = {"authorization": "Bearer %s" % auth["api_key"]}
        cfg.api_key_prefix = {}
    if auth["validate_certs"] is not None:
        cfg.verify_ssl = auth["validate_certs"]
    if auth["ca_cert"]:
        cfg.ssl_ca_cert = auth["ca_cert"]
    if auth["client_cert"]:
        cfg.cert_file = auth["client_cert"]
    if auth["client_key"]:
        cfg.key_file = auth["client_key"]
    if auth["proxy"]:
        cfg.proxy = auth["proxy"]
    if auth["no_proxy"]:
        cfg.no_proxy = auth["no_proxy"]
    return cfg


def impersonation_headers(auth):
    """The headers that make the API server act as ``impersonate_user`` in ``impersonate_groups``.
    The client sends one value per header name, and the server reads each Impersonate-Group header
    as one group: one group at most."""
    headers = {}
    if auth.get("impersonate_user"):
        headers["Impersonate-User"] = auth["impersonate_user"]
    groups = auth.get("impersonate_groups") or []
    if len(groups) > 1:
        raise KubeError(
            "one group at most (the client sends one Impersonate-Group header), not %d"
            % len(groups),
            "kubernetes",
            "impersonate_groups",
        )
    if groups:
        headers["Impersonate-Group"] = groups[0]
    return headers


def _api_client(options):
    client = kubernetes.client.ApiClient(configuration(options))
    for name, value in impersonation_headers(auth_options(options)).items():
        client.set_default_header(name, value)
    return client


def api_client(options=None):
    """A ``kubernetes.client.ApiClient`` from the options (impersonating when they say so)."""
    return _api_client(options)


def dynamic_client(options=None):
    """A ``kubernetes.dynamic.DynamicClient`` (API discovery) from the options."""
    client = _api_client(options)
    cfg = client.configuration
    try:
        return kubernetes.dynamic.DynamicClient(client)
    except ApiException as e:
        raise _api_error(e, cfg.host, "/apis")
    except Urllib3Error as e:
        raise KubeError("cannot reach the API server %s: %s" % (cfg.host, e))


def _api_error(e, host, path):
    message = e.reason
    try:
        message = json.loads(e.body).get("message") or message
    except (TypeError, ValueError, AttributeError):
        pass
    hint = ""
    if e.status == 401:
        hint = " (the API server did not accept the credentials: check api_key or the kubeconfig's user)"
    elif e.status == 403:
        hint = " (the credentials lack the permission)"
    return KubeError("GET %s%s: %s %s%s" % (host, path, e.status, message, hint), status=e.status)


def _pages(call, path, *args):
    """Every item of a list call (a generated API method), page by page, as plain JSON dicts."""
    host = call.__self__.api_client.configuration.host
    items, token = [], None
    while True:
        kwargs = {"limit": PAGE, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        try:
            response = call(*args, **kwargs)
        except ApiException as e:
            raise _api_error(e, host, path)
        except Urllib3Error as e:
            raise KubeError("cannot reach the API server %s: %s" % (host, e))
        try:
            page = json.loads(response.data)
        except ValueError as e:
            raise KubeError("GET %s%s: not JSON: %s" % (host, path, e))
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def list_nodes(client):
    """Every Node of the cluster (``client``: an ApiClient)."""
    return _pages(kubernetes.client.CoreV1Api(client).list_node, "/api/v1/nodes")


def read_node(client, name):
    """Node ``name`` as plain JSON; KubeError (status 404 when there is none)."""
    return json_call(
        kubernetes.client.CoreV1Api(client).read_node, "GET", "/api/v1/nodes/" + name, name
    )


def list_cluster_objects(client, group, version, plural):
    """Every object of a cluster-scoped custom resource; KubeError with status 404 when it is not installed."""
    return _pages(
        kubernetes.client.CustomObjectsApi(client).list_cluster_custom_object,
        "/apis/%s/%s/%s" % (group, version, plural),
        group,
        version,
        plural,
    )


# -- kilo.mesh.peer, annotate, agent (and its identity: apply_object) ----------------------------

FIELD_MANAGER = "kilo-mesh"
DRY_RUN = "All"
# Metadata the server writes; left out when an object is compared with what applying it gives.
SERVER_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "uid",
    "selfLink",
)


def argument_spec():
    """The ``AnsibleModule`` argument spec of the doc fragment's options; the token is never logged."""
    return dict(
        kubeconfig=dict(type="path"),
        context=dict(type="str"),
        host=dict(type="str"),
        api_key=dict(type="str", no_log=True),
        validate_certs=dict(type="bool", aliases=["verify_ssl"]),
        ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
        client_cert=dict(type="path", aliases=["cert_file"]),
        client_key=dict(type="path", aliases=["key_file"], no_log=False),
        proxy=dict(type="str"),
        no_proxy=dict(type="str"),
        impersonate_user=dict(type="str"),
        impersonate_groups=dict(type="list", elements="str"),
    )


def call_error(e, method, path, subject=None):
    """A KubeError of a failed call (ApiException or a dynamic client's error), the server's message kept."""
    status = getattr(e, "status", None)
    message = getattr(e, "reason", None) or str(e)
    try:
        message = json.loads(e.body).get("message") or message
    except (TypeError, ValueError, AttributeError):
        pass
    hint = ""
    if status == 401:
        hint = " (the API server did not accept the credentials: check api_key or the kubeconfig's user)"
    elif status == 403:
        hint = (
            " (the credentials lack this permission: bind them to the ClusterRole kilo-mesh of"
            " manifests/rbac.yaml, which playbooks/kubernetes.yml installs)"
        )
    return KubeError(
        "%s %s: %s %s%s" % (method, path, status, message, hint), subject, status=status
    )


def not_found_name(e):
    """The object name a 404 is about, None when the path itself is unknown (a resource type not installed)."""
    try:
        return (json.loads(e.body).get("details") or {}).get("name")
    except (TypeError, ValueError, AttributeError):
        return None


def json_call(call, method, path, *args, **kwargs):
    """``call(*args, **kwargs)`` of a generated API as plain JSON; errors as KubeError (ApiException kept as cause)."""
    kwargs["_preload_content"] = False
    try:
        response = call(*args, **kwargs)
    except ApiException as e:
        error = call_error(e, method, path)
        error.not_found_name = not_found_name(e) if e.status == 404 else None
        raise error
    except Urllib3Error as e:
        raise KubeError("cannot reach the API server: %s" % e)
    try:
        return json.loads(response.data)
    except ValueError as e:
        raise KubeError("%s %s: not JSON: %s" % (method, path, e))


PATCH_TIMEOUT = 30  # seconds: a dead pooled connection must not hold the agent's loop for long


def merge_patch_node(client, name, body):
    """A JSON merge patch of Node ``name`` (a ``None`` value removes an annotation); the Node after it.

    Newer clients take the content type as ``_content_type``; the generated ``patch_node`` of
    older ones (Debian 12's python3-kubernetes 22) has no way to ask for it and would send a JSON
    patch for a dict body, so there the request goes through that client's generic ``call_api``."""
    path = "/api/v1/nodes/" + name
    api = kubernetes.client.CoreV1Api(client)
    try:
        try:
            response = api.patch_node(
                name,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=PATCH_TIMEOUT,
            )
        except TypeError:
            response = client.call_api(
                "/api/v1/nodes/{name}",
                "PATCH",
                {"name": name},
                [],
                {"Accept": "application/json", "Content-Type": "application/merge-patch+json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=PATCH_TIMEOUT,
            )
    except ApiException as e:
        raise call_error(e, "PATCH", path, "node %r" % name)
    except Urllib3Error as e:
        raise KubeError("cannot reach the API server: %s" % e)
    return json.loads(response.data)


def object_key(obj):
    meta = obj.get("metadata") or {}
    return "%s/%s" % (
        obj.get("kind"),
        "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p),
    )


def comparable(obj):
    """``obj`` without its status and the metadata the server writes."""
    if obj is None:
        return None
    obj = dict(obj)
    obj.pop("status", None)
    meta = dict(obj.get("metadata") or {})
    for key in SERVER_METADATA:
        meta.pop(key, None)
    annotations = dict(meta.get("annotations") or {})
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    obj["metadata"] = meta
    return obj


def apply_object(dyn, obj, state="present", check_mode=False):
    """Server-side apply (``present``) or delete (``absent``) one object with a DynamicClient.

    The server computes the result first as a dry run: when it equals what is there (status and
    server-written metadata aside), nothing is sent. Check mode stops after the dry run.
    Returns ``(action, before, after)``: action is created, updated, deleted or unchanged.
    """
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError  # pylint: disable=import-outside-toplevel

    key = object_key(obj)
    meta = obj["metadata"]
    try:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    except ResourceNotFoundError:
        raise KubeError(
            "the cluster serves no kind %s in %s" % (obj["kind"], obj["apiVersion"]), key
        )
    namespace = (meta.get("namespace") or "default") if resource.namespaced else None
    if namespace:
        obj = dict(obj, metadata=dict(meta, namespace=namespace))
    path = resource.path(name=meta["name"], namespace=namespace)
    method = "GET"
    try:
        try:
            before = resource.get(name=meta["name"], namespace=namespace).to_dict()
        except DynamicApiError as e:
            if e.status != 404:
                raise
            before = None
        if state == "absent":
            if before is None:
                return "unchanged", None, None
            method = "DELETE"
            resource.delete(
                name=meta["name"], namespace=namespace, dry_run=DRY_RUN if check_mode else None
            )
            return "deleted", before, None
        method = "PATCH"

        def apply(dry_run=None):
            return dyn.server_side_apply(
                resource,
                body=obj,
                name=meta["name"],
                namespace=namespace,
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
                dry_run=dry_run,
            ).to_dict()

        after = apply(DRY_RUN)
        if before is not None and comparable(before) == comparable(after):
            return "unchanged", before, before
        if not check_mode:
            after = apply()
        return ("created" if before is None else "updated"), before, after
    except DynamicApiError as e:
        raise call_error(e, method, path, key)
    except Urllib3Error as e:
        raise KubeError("cannot reach the API server: %s" % e, key)
