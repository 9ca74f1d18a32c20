"""Run the collection's real converge on this host and SIGKILL ourselves at a chosen point.

Used by test_faults.py inside a lab host (``lab.run``), with PYTHONPATH pointing at the
checkout's .collections. Production code is unchanged; only this driver wraps it.

    python3 faultdriver.py POINT < {"plan": ..., "preshared_keys": {...}, "settings": {...}}

POINT is one of
  after:<backend>    right after that backend's apply returned (wireguard, netstate, firewall)
  wireguard.create   right after the WireGuard interface was made, before any key or peer
  wireguard.peers    after only part of the peer changes reached WireGuard (a cut-off UAPI
                     write or netlink batch), before the rest and before the link goes up
Prints ``KILLPOINT <point>`` just before the kill; exits 3 when the point was never reached.
"""

import json
import os
import signal
import sys

from ansible_collections.kilo.mesh.plugins.module_utils.host import converge as cv
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import backend as wgmod


def die(point):
    sys.stdout.write("KILLPOINT %s\n" % point)
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main():
    point = sys.argv[1]
    data = json.load(sys.stdin)
    settings = cv.host_settings(data.get("settings") or {})
    backends = cv.backends_for(settings, data.get("preshared_keys") or {})
    order = [b.name for b in backends]

    if point.startswith("after:"):
        name = point.split(":", 1)[1]
        assert name in order, (name, order)
        for b in backends:
            if b.name == name:
                orig = b.apply

                def apply(current, desired, _orig=orig):
                    _orig(current, desired)
                    die(point)

                b.apply = apply
    elif point == "wireguard.create":
        wg = backends[order.index("wireguard")]
        orig_create = wg._create

        def create(impl):
            orig_create(impl)
            die(point)

        wg._create = create
    elif point == "wireguard.peers":
        orig_build = wgmod.build_set

        def build_set(priv, listen_port, fwmark, peers):
            peers = list(peers)
            return orig_build(priv, listen_port, fwmark, peers[: max(1, len(peers) // 2)])

        class UAPI(wgmod.UAPIClient):
            def set(self, text):
                super(UAPI, self).set(text)
                die(point)

        class Kernel(wgmod.KernelWG):
            def set(self, **kw):
                peers = list(kw.get("peers") or [])
                kw["peers"] = peers[: max(1, len(peers) // 2)]
                super(Kernel, self).set(**kw)
                die(point)

        wgmod.build_set = build_set
        wgmod.UAPIClient = UAPI
        wgmod.KernelWG = Kernel
    else:
        raise SystemExit("unknown point %r" % point)

    result = cv.converge(data["plan"], data.get("settings") or {}, backends=backends)
    sys.stdout.write("NOT KILLED %s\n" % json.dumps(result["changes"], sort_keys=True))
    sys.exit(3)


if __name__ == "__main__":
    main()
