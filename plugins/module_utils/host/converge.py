# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Converge one host to its plan: WireGuard, then addresses/routes/rules, then firewall.

Every backend has the same shape (``Backend``), and data flows through arguments and return
values only: ``current`` reads what we own, ``desired`` resolves the plan against the host,
``changes`` compares (and raises ``KiloError`` when the plan cannot be carried out, so check
mode fails exactly where the real run would), ``apply`` and ``remove`` act, ``diff`` renders
both sides without keys. No Ansible imports: the module is a thin shell around ``converge``.
"""

from __future__ import absolute_import, division, print_function
from __future__ import annotations

__metaclass__ = type

import contextlib
import fcntl
import os
import time

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    check_interface_name,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import defaults
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan

# Type hints: the annotations are never evaluated (``annotations`` above), and typing is not
# imported at run time (a host's call pays for every import); type checkers read this block.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence


class Backend(object):
    """One part of a host's state that we own. Subclasses override every method."""

    name = ""

    def __init__(
        self, settings: Mapping[str, Any], preshared_keys: Optional[Mapping[str, str]] = None
    ) -> None:
        # settings: every "host" option (options.defaults("host") filled in);
        # preshared_keys: {peer public key: key}, only WireGuard reads them.
        self.settings = settings
        self.interface = settings.get("interface")

    def current(self, plan: Any) -> Any:
        """What we own on the host now; ``plan`` (None when removing) says what to look at."""
        raise NotImplementedError

    def desired(self, plan: Any, current: Any) -> Any:
        """The state the checked ``plan`` asks for on this host; reads the host, changes nothing."""
        raise NotImplementedError

    def changes(self, current: Any, desired: Any) -> list[str]:
        """Readable list of what ``apply`` would do; raises KiloError when it cannot be done."""
        raise NotImplementedError

    def apply(self, current: Any, desired: Any) -> None:
        """Bring the host from ``current`` to ``desired`` by difference."""
        raise NotImplementedError

    def diff(self, current: Any, desired: Any) -> tuple[Any, Any]:
        """(before, after) for Ansible's diff; ``desired`` is None when removing; no keys."""
        raise NotImplementedError

    def owns(self, current: Any) -> bool:
        """Whether ``current`` holds anything ``remove`` would delete."""
        raise NotImplementedError

    def remove(self, current: Any) -> None:
        """Delete what we own, and nothing else."""
        raise NotImplementedError

    def removal(self, current: Any) -> list[str]:
        """What ``remove`` would do (``changes`` of a removal): the backend's name when it owns
        anything; a backend may name each thing instead."""
        return ["remove %s" % self.name] if self.owns(current) else []


class Step(object):
    """One backend's comparison: the plan it was handed, what it read, what it wants (None when
    removing), its changes and its diff's two sides."""

    __slots__ = ("backend", "plan", "current", "desired", "changes", "before", "after")

    def __init__(
        self,
        backend: Backend,
        plan: Any,
        current: Any,
        desired: Any,
        changes: list[str],
        before: Any,
        after: Any,
    ) -> None:
        self.backend = backend
        self.plan = plan
        self.current = current
        self.desired = desired
        self.changes = changes
        self.before = before
        self.after = after


def compare(backends: Sequence[Backend], plan: Any, absent: bool = False) -> list[Step]:
    """Every backend reads and compares before any acts: a ``Step`` per backend, in the order they
    act (removal in reverse: the firewall and routes before the interface they point at).
    ``plan`` is what the backends are asked for (None when removing)."""
    steps = []
    for backend in reversed(backends) if absent else backends:
        current = backend.current(None if absent else plan)
        if absent:
            desired, changes = None, backend.removal(current)
        else:
            desired = backend.desired(plan, current)
            changes = backend.changes(current, desired)
        before, after = backend.diff(current, desired)
        steps.append(Step(backend, plan, current, desired, changes, before, after))
    return steps


def needs(steps: Iterable[Step]) -> list[str]:
    """What the callers must send before anything can change (a backend's ``need``)."""
    return sorted(set(n for step in steps for n in getattr(step.backend, "need", ())))


def carry_out(steps: Iterable[Step], absent: bool = False, again: bool = True) -> None:
    """Apply (or remove) the steps with changes, in order, by difference. After a backend changed
    the host (made the interface, say) the next ones read and compare again (``again``; a step
    then holds what it applied)."""
    applied = False
    for step in steps:
        if not step.changes:
            continue
        if absent:
            step.backend.remove(step.current)
            continue
        if applied and again:
            step.current = step.backend.current(step.plan)
            step.desired = step.backend.desired(step.plan, step.current)
        step.backend.apply(step.current, step.desired)
        applied = True


def run(
    backends: Sequence[Backend], plan: Any, check_mode: bool, absent: bool = False
) -> list[Step]:
    """Compare every backend, then (outside check mode, and when no backend needs anything sent)
    carry the changes out: check mode, diff and ownership of every user of ``Backend`` in one
    place. Returns the steps."""
    steps = compare(backends, plan, absent)
    if not check_mode and not needs(steps):
        carry_out(steps, absent)
    return steps


def backends_for(
    settings: Mapping[str, Any],
    preshared_keys: Optional[Mapping[str, str]] = None,
    app: Optional[Mapping[str, Any]] = None,
    takeover: bool = False,
) -> list[Backend]:
    """The backends of a converge, in order. ``takeover`` (``converge``'s): the routes take over
    foreign routes at the plan's destinations for this converge, whatever ``route_conflict`` says;
    the boot restore keeps the host's own settings, so no later restore takes anything over."""
    # Imported here so that a host missing one backend's dependency still gets a clear
    # message from the backend that needs it.
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.backend import (
        WireGuardBackend,
    )
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.backend import (
        NetStateBackend,
    )
    from ansible_collections.kilo.mesh.plugins.module_utils.host.firewall import FirewallBackend
    from ansible_collections.kilo.mesh.plugins.module_utils.host.cni import CNIBackend
    from ansible_collections.kilo.mesh.plugins.module_utils.host.boot import BootBackend

    # boot last: the stored plan is written only once every other backend applied it
    routes = dict(settings, route_conflict="replace") if takeover else settings
    return [
        WireGuardBackend(settings, preshared_keys),
        NetStateBackend(routes),
        FirewallBackend(settings),
        CNIBackend(settings),
        BootBackend(settings, preshared_keys, app),
    ]


def host_settings(given: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """Every host option, the given (non-None) values over the table's defaults."""
    settings = defaults("host")
    settings.update((k, v) for k, v in (given or {}).items() if v is not None and k in settings)
    check_interface_name(settings["interface"])
    return settings


# The longest a converge waits for its moment in a key rotation's schedule (switch_at): a moment
# further off is a clock far from the controller's, and waiting would only stall the run.
MAX_SWITCH_WAIT = 30


# Held by every converge that changes the host; in RUN_DIR (wireguard.daemon), a tmpfs: a lock
# never outlives a boot.
LOCK_NAME = "converge.lock"
# shorter than the task timeout (kilo_task_timeout, 300 s): a run kept waiting fails with Busy's
# message, not Ansible's timeout
LOCK_TIMEOUT = 240.0


class Busy(KiloError):
    """Another converge of this host holds the lock."""


@contextlib.contextmanager
def converge_lock(timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Wait for (at most ``timeout`` s; 0: not at all) and hold the host's converge lock; Busy otherwise."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import (
        daemon as wireguard_daemon,
    )

    if not os.path.isdir(wireguard_daemon.RUN_DIR):
        os.makedirs(wireguard_daemon.RUN_DIR, 0o700)
    path = os.path.join(wireguard_daemon.RUN_DIR, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.time() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError):
                if time.time() >= deadline:
                    raise Busy(
                        "another converge of this host has held %s for %d s" % (path, timeout)
                    )
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def refuse_tunnel_changes(steps: Iterable[tuple[Backend, Any, Any]]) -> None:
    """KiloError naming the tunnel changes among ``steps`` ((backend, current, desired) of the
    backends with changes), for ``converge(takeover=True)``."""
    moved = []
    for backend, current, desired in steps:
        moved += getattr(backend, "tunnel_changes", lambda c, d: None)(current, desired) or []
    if moved:
        raise KiloError(
            "the interface runs other tunnels than the plan says (%s); a takeover in place would change"
            " them, so nothing was changed: the plan must be the mesh the interface's agent computed"
            " (the kilo_* options as its flags)" % "; ".join(moved),
            "takeover",
        )


def wait_for(
    switch_at: float, now: Optional[float] = None, sleep: Callable[[float], Any] = time.sleep
) -> float:
    """Sleep until ``switch_at`` (seconds since the epoch) when it is ahead and within
    MAX_SWITCH_WAIT; returns how late the moment is met (negative: early, never in practice)."""
    now = time.time() if now is None else now
    ahead = switch_at - now
    if 0 < ahead <= MAX_SWITCH_WAIT:
        sleep(ahead)
        return 0.0
    return round(max(0.0, -ahead), 3)


def converge(
    plan: Mapping[str, Any],
    settings: Optional[Mapping[str, Any]] = None,
    check_mode: bool = False,
    backends: Optional[Sequence[Backend]] = None,
    preshared_keys: Optional[Mapping[str, str]] = None,
    switch_at: Optional[float] = None,
    pending_public_key: Optional[str] = None,
    app: Optional[Mapping[str, Any]] = None,
    locked: bool = False,
    takeover: bool = False,
) -> dict[str, Any]:
    """Bring this host to ``plan`` (or remove our state with ``state: absent``).

    The plan is checked against ``plan.SCHEMA`` first, then every backend reads and compares
    before any applies, so a plan this host cannot carry out (no private interface, no IPIP,
    a foreign route in the way) fails before anything changes, in check mode too.
    Returns ``{"changed", "changes": {backend: [str]}, "diff": {"before", "after"}}``;
    nothing in it carries a private or preshared key.

    ``pending_public_key`` (check mode only): the public key the key step stood in for a key it would
    make or rotate, so the WireGuard comparison shows the switch rather than the key on disk.

    ``switch_at``: a key rotation's moment for this host (kilo.mesh.join's schedule): changes
    are applied then, not as soon as they are known, so a rotating host switches its key just
    before its peers switch to the new one (``late``: seconds past the moment, in the result).

    ``takeover``: the interface is another agent's (Kilo's ``kg``) and is taken over in place
    (``playbooks/migrate.yml``): a KiloError, before anything changes, when the plan would change
    its key, port or peers (``tunnel_changes``: the tunnels must already be what the plan says, or
    the two agents did not compute the same mesh). Routes, addresses and the firewall are taken
    over by difference as usual, the other agent's routes at the plan's destinations replaced for
    this call alone (``backends_for``: never in the stored plan's settings).

    ``app`` ({"digest", "src"}): the zip application of the boot restore (``boot.BootBackend``);
    when the host lacks it and ``src`` is not given, nothing changes and the result's ``need`` is
    ``["app"]``: the caller sends it and calls again.

    Two converges of one host never overlap (the module, the boot restore, the agent, a restarted
    userspace daemon's restore): with the host's own backends (``backends`` None) and outside
    check mode, reading, comparing and applying run under ``converge_lock`` (``locked``: the
    caller holds it already).
    """
    lock = (
        converge_lock()
        if backends is None and not check_mode and not locked
        else contextlib.nullcontext()
    )
    with lock:
        settings = host_settings(settings)
        if check_mode and pending_public_key:
            # the key step's stand-in for a key it would make or rotate: the comparison shows the switch
            settings["pending_public_key"] = pending_public_key
        absent = settings["state"] == "absent"
        if not absent:
            if plan is None:
                raise KiloError("required when state is present", "plan")
            plan = check_plan(plan, settings["interface"])
        if backends is None:
            backends = backends_for(
                settings, preshared_keys or {}, app, takeover=takeover and not absent
            )

        steps = compare(backends, plan, absent)
        result = {"changed": False, "changes": {}, "diff": {"before": {}, "after": {}}}
        for step in steps:
            result["diff"]["before"][step.backend.name] = step.before
            result["diff"]["after"][step.backend.name] = step.after
            if step.changes:
                result["changes"][step.backend.name] = step.changes
                result["changed"] = True
        if takeover and not absent:
            refuse_tunnel_changes((s.backend, s.current, s.desired) for s in steps if s.changes)
        # A backend may leave something alone and say why (CNI: a file that is not ours).
        warnings = [w for backend in backends for w in getattr(backend, "warnings", ())]
        if warnings:
            result["warnings"] = warnings
        need = needs(steps)
        if need and not check_mode:
            # the caller sends what is missing and calls again; nothing changed meanwhile
            return {
                "changed": False,
                "need": need,
                "changes": {},
                "diff": {"before": {}, "after": {}},
            }
        if check_mode:
            return result

        if switch_at and result["changed"]:
            result["late"] = wait_for(switch_at)
        carry_out(steps, absent)
        return result
