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
    for name in ("kubeconfig", "ca_cert"):
        if auth[name]:
            auth[name] = os.path.expanduser(auth[name])
    return auth


def in_cluster(environ=None):
    """Whether this runs in a pod: the service host variable and the token file are there."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and os.path.isfile(SERVICE_ACCOUNT_TOKEN)


def _require():
    if not HAS_KUBERNETES:
        raise KubeError("the Python library 'kubernetes' is needed on the controller (pip install kubernetes): %s"
                        % KUBERNETES_IMPORT_ERROR.strip().splitlines()[-1])


def configuration(options=None):
    """A ``kubernetes.client.Configuration`` from the options (see the module docstring)."""
    _require()
    auth = auth_options(options)
    cfg = kubernetes.client.Configuration()
    try:
        if auth["host"] and auth["api_key"]:
            pass
        elif auth["kubeconfig"] or auth["context"]:
            kubernetes.config.load_kube_config(config_file=auth["kubeconfig"], context=auth["context"],
                                               client_configuration=cfg, persist_config=False)
        elif in_cluster():
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        elif os.path.exists(os.path.expanduser(os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
                                               or "~/.kube/config")):
            kubernetes.config.load_kube_config(client_configuration=cfg, persist_config=False)
        elif not auth["host"]:
            raise KubeError("no Kubernetes client configuration: give kubeconfig, or host and api_key"
                            " (or their K8S_AUTH_* environment variables)")
    except (kubernetes.config.ConfigException, OSError, ValueError) as e:
        raise KubeError("cannot load the client configuration: %s" % e, "kubernetes",
                        "kubeconfig" if auth["kubeconfig"] else None)
    if auth["host"]:
        cfg.host = auth["host"].rstrip("/")
    if auth["api_key"]:
        cfg.api_key = {"authorization": "Bearer %s" % auth["api_key"]}
        cfg.api_key_prefix = {}
    if auth["validate_certs"] is not None:
        cfg.verify_ssl = auth["validate_certs"]
    if auth["ca_cert"]:
        cfg.ssl_ca_cert = auth["ca_cert"]
    return cfg


def api_client(options=None):
    """A ``kubernetes.client.ApiClient`` from the options."""
    return kubernetes.client.ApiClient(configuration(options))


def dynamic_client(options=None):
    """A ``kubernetes.dynamic.DynamicClient`` (API discovery) from the options."""
    cfg = configuration(options)
    try:
        return kubernetes.dynamic.DynamicClient(kubernetes.client.ApiClient(cfg))
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


def list_cluster_objects(client, group, version, plural):
    """Every object of a cluster-scoped custom resource; KubeError with status 404 when it is not installed."""
    return _pages(kubernetes.client.CustomObjectsApi(client).list_cluster_custom_object,
                  "/apis/%s/%s/%s" % (group, version, plural), group, version, plural)
