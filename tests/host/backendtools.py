"""Run one host backend inside a network namespace, in a subprocess, as a host would.

The subprocess is `ip netns exec NS PYTHON -c DRIVER`: pyroute2, nft and iptables then act on
that namespace, and PYTHON can be Debian's /usr/bin/python3 (pyroute2 0.7.2, what hosts run)
or the venv's. A traceback in the driver fails the test: backend errors must be clear.
"""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".collections")

DRIVER = r"""
import importlib, json, sys
sys.path.insert(0, %(collections)r)
req = json.load(sys.stdin)
mod = importlib.import_module("ansible_collections.kilo.mesh.plugins.module_utils." + req["module"])
Backend, Error = getattr(mod, req["backend"]), getattr(mod, req["error"])
out = {}
try:
    b = Backend(req["settings"])
    for op in req["ops"]:
        if op == "check":
            cur, want = b.current(), b.desired(req["plan"])
            out["check"] = b.changes(cur, want)
            json.dumps([cur, want])  # states must be JSON-able for the converge result
            out["before"], out["after"] = b.render(cur), b.render(want)
        elif op in ("apply", "apply_without_probe"):
            if op == "apply_without_probe":
                # skip the side-effect-free IPIP probe so the real netlink creation is tried
                mod.ipip_supported = lambda: True
            cur, want = b.current(), b.desired(req["plan"])
            out["planned"] = b.changes(cur, want)
            out["applied"] = b.apply(cur, want)
        elif op == "remove":
            out["removed"] = b.remove()
        elif op == "render":
            out["render"] = b.render(b.current())
except Error as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def sh(*args, **kw):
    return subprocess.run(args, check=kw.pop("check", True), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, **kw)


def run_backend(ns, module, backend, error, plan, ops, settings, python):
    req = {"module": module, "backend": backend, "error": error, "plan": plan, "ops": ops, "settings": settings}
    proc = sh("ip", "netns", "exec", ns, python, "-c", DRIVER % {"collections": COLLECTIONS},
              input=json.dumps(req), check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
