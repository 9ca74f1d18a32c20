# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Where the registry of hosts' public data is kept: a JSON file (one controller), Redis or a
Kubernetes ConfigMap (every controller, job and slice of AWX / Automation Controller).

The option ``registry`` (``kilo_registry``) names it: a path, or ``redis://`` / ``rediss://`` /
``unix://`` URL (``redis://[:PASSWORD@]HOST:PORT/DB``, the redis client's own form; the query
argument ``key`` names the mesh's keys, ``kilo-registry`` by default, so meshes can share a
database). Both stores hold the same data, ``{"hosts": {name: facts}, "peers": {name: entry}}``,
and change it the same way: ``store.change(fn)`` runs ``fn(data)`` on what the store holds *now*
and writes what ``fn`` changed, so two writers never lose each other's update:

* the file: under an exclusive ``flock`` of ``PATH.lock``, read again, then replaced atomically;
* Redis: one hash per section (``KEY:hosts``, ``KEY:peers``, one field per host or peer, a JSON
  text each), read under ``WATCH`` and written in ``MULTI``/``EXEC`` (only the fields that
  changed); a writer whose hashes moved meanwhile reads again and retries;
* Kubernetes (``kubernetes://NAMESPACE/NAME``, optional query ``kubeconfig`` and ``context``; else
  the client of the ``K8S_AUTH_*`` environment, in-cluster or the default kubeconfig): a ConfigMap
  with ``hosts.json`` and ``peers.json``, replaced with its ``resourceVersion`` (optimistic
  concurrency: a writer whose object moved gets 409 Conflict, reads again and retries), deleted
  once empty.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import random
import time

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import InputError

SECTIONS = ("hosts", "peers")
URL_SCHEMES = ("redis://", "rediss://", "unix://", "kubernetes://")
DEFAULT_KEY = "kilo-registry"
# A Redis writer retries while other writers change the hashes under it: each retry reads again.
REDIS_RETRIES = 200


def is_url(location):
    return isinstance(location, str) and location.startswith(URL_SCHEMES)


def open_store(location):
    """The store ``location`` names (a path or a Redis URL)."""
    if not is_url(location):
        return FileStore(location)
    return (
        KubernetesStore(location) if location.startswith("kubernetes://") else RedisStore(location)
    )


def shown(location):
    """``location`` as results and messages show it: a URL's password masked."""
    return (
        RedisStore.masked(location) if is_url(location) else location
    )  # (kubernetes:// holds no secret)


def empty():
    return {"hosts": {}, "peers": {}}


def check_data(data, subject):
    if not isinstance(data, dict) or not all(isinstance(data.get(k, {}), dict) for k in SECTIONS):
        raise InputError("expected an object with 'hosts' and 'peers' mappings", subject)
    for section in SECTIONS:
        data.setdefault(section, {})
    return data


class FileStore(object):
    """The registry as a JSON file beside the inventory (the default)."""

    def __init__(self, path):
        self.path = path
        self.subject = "registry %s" % path

    def exists(self):
        return os.path.exists(self.path)

    def read(self):
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return empty()
        except ValueError as e:
            raise InputError("not valid JSON: %s" % e, self.subject) from e
        return check_data(data, self.subject)

    def change(self, change):
        """Run ``change(data)`` under an exclusive lock (parallel workers and concurrent
        ansible-playbook processes alike); when it returns true, replace the file atomically."""
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.read()
            changed = change(data)
            if changed:  # 0600 as before (the temporary file's mode)
                write_atomic(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n", 0o600)
            return changed

    def remove(self):
        """The registry gone (a mesh taken away leaves nothing beside the inventory); only from
        inside ``change``, under the lock."""
        for path in (self.path, self.path + ".lock"):
            if os.path.exists(path):
                os.unlink(path)


class RedisStore(object):
    """The registry in Redis: hashes ``KEY:hosts`` and ``KEY:peers``."""

    def __init__(self, url):
        self.url, self.key = self.split(url)
        self.subject = "registry %s" % self.masked(url)
        self._client = None

    @staticmethod
    def split(url):
        """(the client's URL, the key prefix): our query argument ``key`` taken out."""
        from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit  # pylint: disable=import-outside-toplevel

        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        key = dict(query).get("key") or DEFAULT_KEY
        rest = urlencode([(k, v) for k, v in query if k != "key"])
        return urlunsplit(parts._replace(query=rest)), key

    @staticmethod
    def masked(url):
        from urllib.parse import urlsplit, urlunsplit  # pylint: disable=import-outside-toplevel

        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = "%s:***@%s" % (parts.username or "", parts.netloc.rsplit("@", 1)[1])
        return urlunsplit(parts._replace(netloc=netloc))

    @property
    def client(self):
        if self._client is None:
            try:
                import redis  # pylint: disable=import-outside-toplevel
            except ImportError as e:
                raise InputError(
                    "needs the Python package redis on the controller (pip install redis; the"
                    " execution environment of meta/execution-environment.yml has it)",
                    self.subject,
                ) from e
            try:
                self._client = redis.Redis.from_url(
                    self.url, socket_timeout=30, socket_connect_timeout=10
                )
            except ValueError as e:
                raise InputError("not a Redis URL the client takes: %s" % e, self.subject) from e
        return self._client

    def names(self, section):
        return "%s:%s" % (self.key, section)

    def _call(self, what):
        import redis  # pylint: disable=import-outside-toplevel

        try:
            return what()
        except redis.exceptions.RedisError as e:
            raise InputError("Redis: %s" % e, self.subject) from e

    def exists(self):
        return bool(self._call(lambda: self.client.exists(*[self.names(s) for s in SECTIONS])))

    def _decode(self, section, raw):
        out = {}
        for name, text in raw.items():
            name = name.decode() if isinstance(name, bytes) else name
            try:
                out[name] = json.loads(text)
            except ValueError as e:
                raise InputError(
                    "not valid JSON: %s" % e, self.subject, "%s.%s" % (section, name)
                ) from e
        return out

    def _read(self, client):
        return check_data(
            dict((s, self._decode(s, client.hgetall(self.names(s)))) for s in SECTIONS),
            self.subject,
        )

    def read(self):
        return self._call(lambda: self._read(self.client))

    def change(self, change):
        return self._call(lambda: self._change(change))

    def _change(self, change):
        import redis  # pylint: disable=import-outside-toplevel

        keys = [self.names(s) for s in SECTIONS]
        for attempt in range(REDIS_RETRIES):
            with self.client.pipeline() as pipe:
                try:
                    pipe.watch(*keys)
                    data = self._read(pipe)
                    before = copy.deepcopy(data)
                    changed = change(data)
                    if not changed:
                        pipe.unwatch()
                        return changed
                    pipe.multi()
                    for section in SECTIONS:
                        self._write(pipe, section, before[section], data[section])
                    pipe.execute()
                    return changed
                except redis.WatchError:
                    time.sleep(random.uniform(0, min(0.5, 0.005 * (attempt + 1))))
        raise InputError(
            "other writers changed it %d times in a row while this one tried to write"
            % REDIS_RETRIES,
            self.subject,
        )

    def _write(self, pipe, section, before, after):
        name = self.names(section)
        gone = [k for k in before if k not in after]
        if gone:
            pipe.hdel(name, *gone)
        fields = dict(
            (k, json.dumps(v, sort_keys=True)) for k, v in after.items() if before.get(k) != v
        )
        if fields:
            pipe.hset(name, mapping=fields)

    def remove(self):
        """Nothing to do: Redis drops a hash with no field left."""


class KubernetesStore(object):
    """The registry as a ConfigMap (``kubernetes://NAMESPACE/NAME``): ``hosts.json``, ``peers.json``."""

    def __init__(self, url):
        from urllib.parse import parse_qsl, urlsplit  # pylint: disable=import-outside-toplevel

        parts = urlsplit(url)
        self.namespace, self.name = parts.netloc, parts.path.strip("/")
        self.subject = "registry %s" % url
        if not self.namespace or not self.name or "/" in self.name:
            raise InputError("expected kubernetes://NAMESPACE/NAME", self.subject)
        query = dict(parse_qsl(parts.query))
        self.options = dict((k, query[k]) for k in ("kubeconfig", "context") if query.get(k))
        self._api = None

    @property
    def api(self):
        if self._api is None:
            from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client  # pylint: disable=import-outside-toplevel

            try:
                import kubernetes.client  # pylint: disable=import-outside-toplevel

                self._api = kubernetes.client.CoreV1Api(kube_client.api_client(self.options))
            except ImportError as e:
                raise InputError(
                    "needs the Python package kubernetes on the controller", self.subject
                ) from e
            except kube_client.KubeError as e:
                raise InputError(str(e), self.subject) from e
        return self._api

    def _call(self, method, *args, **kwargs):
        """(status, JSON body) of a CoreV1Api call; 404 and 409 are answers, other errors raise."""
        from kubernetes.client.exceptions import ApiException  # pylint: disable=import-outside-toplevel
        from urllib3.exceptions import HTTPError  # pylint: disable=import-outside-toplevel

        try:
            response = getattr(self.api, method)(*args, _preload_content=False, **kwargs)
        except ApiException as e:
            if e.status in (404, 409):
                return e.status, None
            from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_client import (
                call_error,
            )  # pylint: disable=import-outside-toplevel

            raise InputError(
                str(call_error(e, method, "configmaps/%s/%s" % (self.namespace, self.name))),
                self.subject,
            ) from e
        except HTTPError as e:
            raise InputError("cannot reach the API server: %s" % e, self.subject) from e
        return response.status, json.loads(response.data or b"null")

    def _get(self):
        """(resourceVersion or None when there is no ConfigMap, data)."""
        status, body = self._call("read_namespaced_config_map", self.name, self.namespace)
        if status == 404:
            return None, empty()
        data = {}
        for section in SECTIONS:
            text = (body.get("data") or {}).get(section + ".json") or "{}"
            try:
                data[section] = json.loads(text)
            except ValueError as e:
                raise InputError("not valid JSON: %s" % e, self.subject, section + ".json") from e
        return body["metadata"]["resourceVersion"], check_data(data, self.subject)

    def exists(self):
        return self._get()[0] is not None

    def read(self):
        return self._get()[1]

    def change(self, change):
        for attempt in range(REDIS_RETRIES):
            version, data = self._get()
            changed = change(data)
            if not changed:
                return changed
            if not any(data[s] for s in SECTIONS):
                status = (
                    200
                    if version is None
                    else self._call(
                        "delete_namespaced_config_map",
                        self.name,
                        self.namespace,
                        body={"preconditions": {"resourceVersion": version}},
                    )[0]
                )
            else:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": self.name,
                        "namespace": self.namespace,
                        "labels": {"app.kubernetes.io/managed-by": "kilo-mesh"},
                    },
                    "data": dict(
                        (s + ".json", json.dumps(data[s], indent=1, sort_keys=True))
                        for s in SECTIONS
                    ),
                }
                if version is None:
                    status = self._call("create_namespaced_config_map", self.namespace, body)[0]
                else:
                    body["metadata"]["resourceVersion"] = version
                    status = self._call(
                        "replace_namespaced_config_map", self.name, self.namespace, body
                    )[0]
            if status not in (404, 409):
                return changed
            time.sleep(
                random.uniform(0, min(0.5, 0.01 * (attempt + 1)))
            )  # another writer was first: again
        raise InputError(
            "other writers changed it %d times in a row while this one tried to write"
            % REDIS_RETRIES,
            self.subject,
        )

    def remove(self):
        """Nothing to do: change() deletes the ConfigMap once it holds nothing."""
