# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The official Kubernetes client, without importing the parts a process never uses.

``import kubernetes`` (and any ``kubernetes.client.X``) runs the generated package files that
import every API class and every model class: about 900 modules. In the agent on Debian 12
(/usr/bin/python3 3.11, python3-kubernetes 22.6) that was 34 MB of its ~90 MB among 1,000 Nodes,
for four classes it uses (``ApiClient``, ``Configuration``, ``CoreV1Api``, ``CustomObjectsApi``)
and the config loader.

``install()`` puts stand-ins for the packages ``kubernetes``, ``kubernetes.client``,
``kubernetes.client.api`` and ``kubernetes.client.models`` in ``sys.modules`` before anything
imports them. Each is the real package (same ``__path__``, so every submodule imports from the
same files as usual) whose package-level names resolve on first use: a name the real
``__init__.py`` imports with ``from MODULE import NAME`` is taken from that MODULE then, any
other from the submodule of that name. The code that runs is the client's own; only what a
process asks for is imported. Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import importlib.util
import re
import sys
import types

PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.client.api", "kubernetes.client.models")
_FROM_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+(\w+)(?:\s+as\s+\2)?\s*$", re.M)
_OWN_GETATTR = re.compile(r"^\s*def __getattr__\(", re.M)
_VERSION = re.compile(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", re.M)


def _stand_in(name):
    """A module for package ``name`` whose attributes are imported when first asked for."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations or not spec.origin:
        return None
    with open(spec.origin) as f:
        text = f.read()
    if _OWN_GETATTR.search(text):
        return None  # a package that imports its names on first use already (PyPI's newer clients)
    origins = dict(
        (attr, module) for module, attr in _FROM_IMPORT.findall(text) if not module.startswith(".")
    )
    module = types.ModuleType(name)
    module.__file__ = spec.origin
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = name
    module.__spec__ = spec
    module.__loader__ = spec.loader
    version = _VERSION.search(text)
    if version:
        module.__version__ = version.group(1)

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in origins:
            value = getattr(importlib.import_module(origins[attr]), attr)
        else:
            try:
                value = importlib.import_module(name + "." + attr)
            except ImportError as e:
                if getattr(e, "name", None) != name + "." + attr:
                    raise
                raise AttributeError("module %r has no attribute %r" % (name, attr))
        setattr(module, attr, value)
        return value

    module.__getattr__ = __getattr__
    module.__dir__ = lambda: sorted(set(module.__dict__) | set(origins))
    return module


def install():
    """Put the stand-ins in place, unless ``kubernetes`` is imported already (then nothing
    changes) or not installed. Returns True when they are in place."""
    if PACKAGES[0] in sys.modules:
        return isinstance(
            getattr(sys.modules[PACKAGES[0]], "__getattr__", None), types.FunctionType
        )
    try:
        for name in PACKAGES:
            # parents first: finding a submodule's spec then reads the stand-in's __path__
            # instead of running the real parent package
            module = _stand_in(name)
            if module is None:
                break
            sys.modules[name] = module
            parent, _dot, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
    except (ImportError, OSError, ValueError):
        for name in PACKAGES:
            sys.modules.pop(name, None)
        return False
    return PACKAGES[0] in sys.modules
