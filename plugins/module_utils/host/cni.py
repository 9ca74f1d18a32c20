# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The node's CNI configuration list, as Kilo's ``--cni`` keeps it (``--cni-path``).

Kilo ships its conflist in its manifests (an init container writes it to
``/etc/cni/net.d/10-kilo.conflist``): network ``kilo``, a ``bridge`` plugin on ``kube-bridge``
that is the pods' default gateway (``isDefaultGateway``, ``forceAddress``, MTU 1420) with
``host-local`` IPAM, then ``portmap`` (``snat``, the ``portMappings`` capability). No
``ipMasq`` (Kilo's own NAT rules masquerade the pod CIDR) and no loopback entry (container
runtimes bring ``lo`` up themselves). The agent then only sets the IPAM ``ranges`` of every
plugin that has an ``ipam`` section to ``[[{"subnet": <pod CIDR>}]]`` when the first subnet
found there differs from the node's pod CIDR, keeping everything else in the file.

Here, with ``cni`` on and a pod CIDR in the plan:

* no file at ``cni_path``: Kilo's conflist is written with the pod CIDR (the directory is made);
* a conflist named ``kilo`` (ours, or the one Kilo's manifests install): only its IPAM subnet is
  updated, as Kilo does, so local tuning of the rest survives. Beyond Kilo, a legacy ``subnet``
  directly under ``ipam`` is dropped when the ranges are set: host-local would allocate from it
  first, and Kilo, which leaves it, rewrites the file on every resync;
* anything else (another network's file, unparsable JSON, a ``kilo`` conflist without IPAM):
  left alone, with a warning. Kilo would also leave unparsable or IPAM-less files, but rewrites
  the subnet of any other conflist at its path; a file named otherwise belongs to someone else.

A node of several pod ranges (``pod_cidr`` a list) keeps its conflist on the first; where the
IPAM is Calico's or Cilium's their own CNI configuration is the one that counts. Beyond Kilo, a
node of a dual-stack mesh (ranges of both families) gets one range set per family, the first
range of each in the plan's order (``[[{"subnet": v4}], [{"subnet": v6}]]``): host-local then
gives every pod an address of each family. A single-family node's file is exactly Kilo's.

``cni`` off or no pod CIDR: nothing is read or written (an earlier file stays, as with Kilo).
``state: absent`` removes the file only when it is ours (named ``kilo``); the bridge belongs to
the CNI plugin and stays. Writes are atomic (``atomic_file.write_atomic``), mode 0644; the
temporary name does not end in ``.conflist``, so runtimes never read it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import ipaddress
import json
import os

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import Backend

NETWORK = "kilo"
BRIDGE = "kube-bridge"
CNI_VERSION = "0.4.0"
MTU = 1420
MODE = 0o644


def kilo_conflist(subnet):
    """Kilo's conflist (as its manifests install it) with ``subnet`` as the IPAM range (a list of
    them: one range set each, a dual-stack node's)."""
    return with_subnet(_KILO_CONFLIST, subnet)


_KILO_CONFLIST = {
    "cniVersion": CNI_VERSION,
    "name": NETWORK,
    "plugins": [
        {
            "name": "kubernetes",
            "type": "bridge",
            "bridge": BRIDGE,
            "isDefaultGateway": True,
            "forceAddress": True,
            "mtu": MTU,
            "ipam": {"type": "host-local", "ranges": []},
        },
        {"type": "portmap", "snat": True, "capabilities": {"portMappings": True}},
    ],
}


def _ipams(data):
    """The ``ipam`` dicts of the conflist's plugins, in order."""
    plugins = data.get("plugins") if isinstance(data, dict) else None
    if not isinstance(plugins, list):
        return []
    return [p["ipam"] for p in plugins if isinstance(p, dict) and isinstance(p.get("ipam"), dict)]


def _norm(value):
    try:
        return str(ipaddress.ip_network(str(value), strict=False))
    except ValueError:
        return None


def first_subnet(data):
    """The first IPAM subnet of the conflist, the way host-local orders them (legacy
    ``ipam.subnet`` before ``ranges``); None when there is none."""
    for ipam in _ipams(data):
        candidates = [ipam.get("subnet")]
        ranges = ipam.get("ranges")
        for rangeset in ranges if isinstance(ranges, list) else ():
            for entry in rangeset if isinstance(rangeset, list) else ():
                if isinstance(entry, dict):
                    candidates.append(entry.get("subnet"))
        for value in candidates:
            if value:
                return _norm(value)
    return None


def range_set_subnets(data):
    """The first subnet of each range set of the conflist's first IPAM section with ``ranges``
    (normalised), in order; [] when there is none."""
    for ipam in _ipams(data):
        ranges = ipam.get("ranges")
        if isinstance(ranges, list) and ranges:
            return [
                _norm(rangeset[0].get("subnet"))
                if isinstance(rangeset, list) and rangeset and isinstance(rangeset[0], dict)
                else None
                for rangeset in ranges
            ]
    return []


def conflist_subnets(pods):
    """The ranges the conflist holds for the plan's ``pod_cidr``: Kilo's one (a node of several
    ranges of one family: the first); in a dual-stack mesh the first range of each family."""
    if not isinstance(pods, list):
        return [pods] if pods else []
    out, families = [], set()
    for pod in pods:
        family = ipaddress.ip_network(pod, strict=False).version
        if family not in families:
            families.add(family)
            out.append(pod)
    return out


def with_subnet(data, subnet):
    """A copy of the conflist whose every IPAM section holds exactly the range ``subnet`` (a list
    of them: one range set each)."""
    out = copy.deepcopy(data)
    for ipam in _ipams(out):
        ipam.pop("subnet", None)
        ipam["ranges"] = (
            [[{"subnet": one}] for one in subnet]
            if isinstance(subnet, list)
            else [[{"subnet": subnet}]]
        )
    return out


def render(data):
    return json.dumps(data, indent=2) + "\n"


def read(path):
    """What is at ``path``: existence, parsed data, whether it is ours, its subnet."""
    state = {
        "path": path,
        "exists": False,
        "data": None,
        "ours": False,
        "subnet": None,
        "problem": None,
    }
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except (IOError, OSError) as e:
        if os.path.lexists(path):
            state.update(exists=True, problem="cannot be read (%s)" % e.strerror)
        return state
    state["exists"] = True
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        state["problem"] = "is not JSON"
        return state
    if (
        not isinstance(data, dict)
        or data.get("name") != NETWORK
        or not isinstance(data.get("plugins"), list)
    ):
        name = data.get("name") if isinstance(data, dict) else None
        state["problem"] = "is not a conflist of network %r (name %r)" % (NETWORK, name)
        return state
    state.update(data=data, ours=True, subnet=first_subnet(data))
    if not _ipams(data):
        state["problem"] = "has no plugin with an ipam section"
    return state


class CNIBackend(Backend):
    """The conflist at ``cni_path`` (see the module docstring for what is ours)."""

    name = "cni"

    def __init__(self, settings, preshared_keys=None):
        super(CNIBackend, self).__init__(settings, preshared_keys)
        self.path = settings["cni_path"]
        self.warnings = []

    def _warn(self, message):
        message = "cni_path: %s %s; left alone" % (self.path, message)
        if message not in self.warnings:
            self.warnings.append(message)

    def current(self, plan):
        return read(self.path)

    def desired(self, plan, current):
        # a node of several pod ranges (Calico's blocks, Cilium's pool CIDRs): the conflist takes
        # the first (a string, Kilo's); a dual-stack node's, the first of each family (a list)
        subnets = conflist_subnets(plan["pod_cidr"] if plan["cni"] else None)
        subnet = subnets[0] if len(subnets) == 1 else subnets
        if not subnet:
            # cni off or no pod CIDR: not managed, whatever is there stays
            return {
                "path": self.path,
                "data": current["data"],
                "subnet": current["subnet"],
                "managed": False,
            }
        if not current["exists"]:
            return {
                "path": self.path,
                "data": kilo_conflist(subnet),
                "subnet": subnet,
                "managed": True,
            }
        if current["problem"]:
            self._warn(current["problem"])
            return {
                "path": self.path,
                "data": current["data"],
                "subnet": current["subnet"],
                "managed": False,
            }
        data = (
            current["data"]
            if self._held(current, subnet) == subnet
            else with_subnet(current["data"], subnet)
        )
        return {"path": self.path, "data": data, "subnet": subnet, "managed": True}

    @staticmethod
    def _held(current, subnet):
        """What an existing conflist of ours holds, in the form of ``subnet`` (desired()'s): for one
        range, its first subnet (Kilo's reading); for a dual-stack node's list, its range sets (a
        legacy ``ipam.subnet`` beside them counts as a difference: host-local would allocate from
        it first)."""
        if not isinstance(subnet, list):
            return current["subnet"]
        if any(ipam.get("subnet") for ipam in _ipams(current["data"])):
            return [current["subnet"]]
        sets = range_set_subnets(current["data"])
        return sets if len(sets) > 1 else current["subnet"]

    def changes(self, current, desired):
        if not desired["managed"]:
            return []
        shown = (
            ", ".join(desired["subnet"])
            if isinstance(desired["subnet"], list)
            else desired["subnet"]
        )
        if not current["exists"]:
            return ["write %s (subnet %s)" % (self.path, shown)]
        held = self._held(current, desired["subnet"])
        if held != desired["subnet"]:
            was = ", ".join(str(h) for h in held) if isinstance(held, list) else held
            return ["set subnet %s in %s (was %s)" % (shown, self.path, was)]
        return []

    def apply(self, current, desired):
        if self.changes(current, desired):
            write_atomic(self.path, render(desired["data"]), MODE, make_dirs=0o755)

    def diff(self, current, desired):
        before = {"path": self.path, "conflist": current["data"] if current["ours"] else None}
        if desired is None:
            after = {"path": self.path, "conflist": None}
        else:
            after = {
                "path": self.path,
                "conflist": desired["data"] if desired["managed"] else before["conflist"],
            }
        return before, after

    def owns(self, current):
        return bool(current["ours"])

    def remove(self, current):
        if current["ours"] and os.path.lexists(self.path):
            os.unlink(self.path)
