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
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
mod = importlib.import_module("ansible_collections.kilo.mesh.plugins.module_utils.host." + req["module"])
for name, value in req.get("patch", {}).items():
    setattr(mod, name, value)  # module constants a test moves (run directory, say)
out = {}
try:
    settings = host_settings(req["settings"])
    b = getattr(mod, req["backend"])(settings, *req.get("args", []))
    # the plan goes through the module boundary's check, as kilo.mesh.converge does
    plan = check_plan(req["plan"], settings["interface"]) if req["plan"] is not None else None
    for op in req["ops"]:
        if op in ("check", "apply", "apply_without_probe"):
            if op == "apply_without_probe":
                # skip the side-effect-free IPIP probe so the real netlink creation is tried
                mod.kernel_module_available = lambda name: True
            cur = b.current(plan)
            want = b.desired(plan, cur)
            changes = b.changes(cur, want)
            json.dumps([cur, want])  # states must be JSON-able for the converge result
            if op == "check":
                out["check"] = changes
                out["before"], out["after"] = b.diff(cur, want)
            else:
                out["planned"] = changes
                b.apply(cur, want)
        elif op == "remove":
            cur = b.current(None)
            out["removed"] = b.owns(cur)
            b.remove(cur)
        elif op == "render":
            out["render"] = b.diff(b.current(plan), None)[0]
except KiloError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def sh(*args, **kw):
    return subprocess.run(
        args,
        check=kw.pop("check", True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        **kw,
    )


def run_backend(ns, module, backend, plan, ops, settings, python, args=(), patch=None):
    """Run ``ops`` (check, apply, apply_without_probe, remove, render) of one backend in ``ns``.

    ``args`` follow the settings in the constructor (WireGuard's preshared keys); ``patch``
    sets module constants. A KiloError ends the ops and is returned as ``error``.
    """
    req = {
        "module": module,
        "backend": backend,
        "plan": plan,
        "ops": ops,
        "settings": settings,
        "args": list(args),
        "patch": patch or {},
    }
    proc = sh(
        "ip",
        "netns",
        "exec",
        ns,
        python,
        "-c",
        DRIVER % {"collections": COLLECTIONS},
        input=json.dumps(req),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
