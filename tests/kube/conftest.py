"""The `kube` fixture: one real etcd + kube-apiserver for the session (tests/kube/apiserver.py).

Without the binaries the tests skip, unless KILO_REQUIRE_KUBE=1 (CI, `make test`): then they
fail, so a missing control plane never passes silently.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from apiserver import BIN, ROOT, ApiServer, binaries_missing  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(scope="session")
def kube():
    if not os.environ.get("KILO_TEST_KUBECONFIG"):
        missing = binaries_missing()
        if missing:
            where = os.path.relpath(BIN, ROOT) if BIN.startswith(ROOT + os.sep) else BIN
            message = (
                f"no Kubernetes control plane ({', '.join(missing)} missing in "
                f"{where}): run `bash scripts/kube.sh`"
            )
            if os.environ.get("KILO_REQUIRE_KUBE") == "1":
                pytest.fail(message + " (KILO_REQUIRE_KUBE=1)", pytrace=False)
            pytest.skip(message)
    with ApiServer() as server:
        yield server
