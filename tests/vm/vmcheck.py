"""Helpers shared by the VM check scripts (copied into the VM beside them by run.sh)."""
import subprocess
import sys


class Checker(object):
    """Counts checks and prints PASS/FAIL lines; the script ends with `N passed, N failed`."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("PASS %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, str(detail)[:1500]))
        sys.stdout.flush()
        return ok


def run(*args, **kw):
    kw.setdefault("check", True)
    return subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, **kw)
