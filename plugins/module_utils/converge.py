# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Converge one host to its plan: WireGuard, then addresses/routes/rules, then firewall.

Each backend reads only what we own, compares it with what the plan asks for, and applies
the difference. The glue is a loop so that check mode, diff and ``state: absent`` behave the
same for every backend. No Ansible imports: the module is a thin shell around ``converge``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DEFAULT_SETTINGS = {
    "interface": "kilo0",
    "backend": "auto",
    "userspace_command": "wireguard-go",
    "key_path": "/var/lib/kilo/key",
    "mtu": 0,
    "firewall": "nftables",
    "route_conflict": "fail",
    "state": "present",
}


class ConvergeError(Exception):
    """A host-side failure worth a plain message (no traceback)."""


def check_interface(name):
    """Interface names end up in paths (/run/kilo/NAME.pid, /proc/sys/...): Linux's rules only."""
    if not name or len(name) > 15 or name in (".", "..") or any(c in name for c in "/ \t\n:%"):
        raise ConvergeError("interface: %r is not a valid Linux interface name" % (name,))
    return name


# Errors the backends raise on purpose: each message already names what failed.
KNOWN_ERRORS = ("ConvergeError", "WireGuardError", "KernelWGError", "UAPIError", "NetStateError",
                "FirewallError", "KeyError_")


def is_known_error(exc):
    return type(exc).__name__ in KNOWN_ERRORS


def _backends(settings):
    # Imported here so that a host missing one backend's dependency still gets a clear
    # message from the backend that needs it.
    from ansible_collections.kilo.mesh.plugins.module_utils.wireguard import WireGuardBackend
    from ansible_collections.kilo.mesh.plugins.module_utils.netstate import NetStateBackend
    from ansible_collections.kilo.mesh.plugins.module_utils.firewall import FirewallBackend

    return [WireGuardBackend(settings), NetStateBackend(settings), FirewallBackend(settings)]


def with_preshared_keys(plan, preshared_keys):
    """The plan with its peers' preshared keys put back (they travel apart, marked no_log)."""
    if not plan or not preshared_keys:
        return plan
    plan = dict(plan)
    plan["peers"] = [dict(p, preshared_key=preshared_keys[p["public_key"]]) if p.get("public_key") in preshared_keys
                     else p for p in plan.get("peers", [])]
    return plan


def converge(plan, settings=None, check_mode=False, backends=None, preshared_keys=None):
    """Bring this host to ``plan`` (or remove our state with ``state: absent``).

    Every backend reads and compares first, so a plan this host cannot carry out (no
    private interface, no IPIP, a foreign route in the way) fails before anything changes.
    Returns ``{"changed", "changes": {backend: [str]}, "diff": {"before", "after"}}``;
    nothing in it carries a private or preshared key (backends' ``render`` strip them).
    """
    opts = dict(DEFAULT_SETTINGS)
    opts.update(dict((k, v) for k, v in (settings or {}).items() if v is not None))
    plan = with_preshared_keys(plan, preshared_keys)
    if backends is None:
        backends = _backends(opts)

    result = {"changed": False, "changes": {}, "diff": {"before": {}, "after": {}}}
    absent = opts["state"] == "absent"
    steps = []
    # Removal runs in reverse: firewall and routes go before the interface they point at.
    for backend in (reversed(backends) if absent else backends):
        current = backend.current()
        desired = None if absent else backend.desired(plan)
        if absent:
            changes = ["remove %s" % backend.name] if _owns_anything(backend, current) else []
        else:
            changes = backend.changes(current, desired)
        if not absent and hasattr(backend, "render_pair"):
            before, after = backend.render_pair(current, desired)
        else:
            before, after = backend.render(current), (None if absent else backend.render(desired))
        result["diff"]["before"][backend.name] = before
        result["diff"]["after"][backend.name] = after
        if changes:
            result["changes"][backend.name] = changes
            result["changed"] = True
            steps.append((backend, current, desired))
    if check_mode:
        return result

    applied = False
    for backend, current, desired in steps:
        if absent:
            backend.remove()
            continue
        if applied:
            # An earlier backend changed the host (made the interface, say): compare again.
            current, desired = backend.current(), backend.desired(plan)
        backend.apply(current, desired)
        applied = True
    return result


def _owns_anything(backend, current):
    """Whether the live state holds anything of ours (so state=absent has work to do)."""
    return current is not None and backend.owns(current)
