"""tests/core runs under each ansible-core of the range meta/runtime.yml claims (scripts/test.sh,
stages ansible-core-*): the Kubernetes fixtures are tests/kube's, the site.yml helpers
tests/host's."""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(TESTS, "kube"), os.path.join(TESTS, "host")]

# tests/kube/conftest.py's session fixture `kube` (one real etcd + kube-apiserver), not a copy
_spec = importlib.util.spec_from_file_location(
    "kube_conftest", os.path.join(TESTS, "kube", "conftest.py")
)
_kube_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_kube_conftest)
kube = _kube_conftest.kube
