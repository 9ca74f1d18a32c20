# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Every read of Ansible's private attributes by this collection, in one place.

An action plugin sees flat group lists and computed variables; a few things the mesh needs are
only on objects behind them. Each accessor below reads one private attribute and, when Ansible
no longer has it (a newer release renamed it, a test passes plain objects), returns None so the
caller takes its documented fallback. What each fallback gives up:

``inventory_of(hostvars)`` (``HostVars._inventory``): the inventory's parent/child group links,
    which is how a host's location is its child group of the mesh group. Without it the
    locations are unknown: every host of the mesh must set ``kilo_location`` itself, or the
    actions fail naming the first host that does not (``inputs.placed``), never collapsing every
    location into one segment.

``set_in_run(hostvars)`` (the variable manager ``HostVars._variable_manager`` and its
    ``_nonpersistent_fact_cache``, ``_vars_cache``, ``_fact_cache``): which hosts this run has set
    variables on (register, set_fact, include_vars, gathered facts). Without it the topology step
    cannot trust what kilo.mesh.validate read of the hosts outside the play, so it reads every
    host again: slower at scale (one variable computation per host), never stale.

``names_set_in_run(hostvars)`` (the same caches): the names of the variables this run has set on a
    host (register, set_fact, include_vars). Validate refuses a ``kilo_*`` variable it does not
    know, but a task's own registered result (``register: kilo_key``, as the modules' examples do)
    is no inventory variable. Without it every ``kilo_*`` name a host has is checked: a user's
    play that registers such a name before kilo.mesh.validate is refused.

``extra_vars(hostvars)`` (the variable manager's ``extra_vars``): the run's ``-e`` variables. A
    play's ``hosts:`` is templated with these alone (no inventory variable reaches it), so which
    group the playbooks' plays run on is ``-e kilo_group`` or ``kilo``; validate says so when the
    inventory names another. Without it the variable as the host sees it is taken instead.

``limit_admits(inventory, pattern)`` (the InventoryManager of ``inventory_of``; its ``get_hosts``
    with ``ignore_restrictions``): the hosts of a pattern that the run's ``--limit`` admits,
    whatever play is running. It relies on three things: the action's worker is a fork of
    ansible-playbook, so the manager it sees carries the subset the command line set before the
    first play; ``get_hosts`` applies that subset (unless ``ignore_limits``); and with
    ``ignore_restrictions`` it leaves out the restriction the executor puts on the manager for
    each play or serial batch (and the failed hosts), which would otherwise make every host
    outside the running play look excluded. Without it the admitted hosts are unknown: a machine
    connecting as a peer then counts every mesh host as left out, so its own key does not rotate
    (rotation by age held back, ``kilo_key_rotate`` refused), rather than rotate and be cut off.

``forks()`` (``ansible.context.CLIARGS``, the command line as parsed): how many hosts a task runs
    on at once. Without it a key rotation takes the ordered way (rotating hosts converge in a
    task of their own before their peers) rather than the scheduled one.

``play_id(task)`` (the play's ``_uuid``): a key telling this play apart from the run's other
    plays, under which validate hands its reading to the topology step. Without it nothing is
    handed over: the topology step reads every host itself (slower, same result).
"""

from __future__ import annotations

from ansible import constants as C


def inventory_of(hostvars):
    """The InventoryManager behind Ansible's ``hostvars``, or None."""
    return getattr(hostvars, "_inventory", None)


def limit_admits(inventory, pattern):
    """The names of the hosts matching ``pattern`` that the run's --limit admits (a set), or None
    when ``inventory`` is not a manager that tells."""
    get_hosts = getattr(inventory, "get_hosts", None)
    if not callable(get_hosts):
        return None
    try:
        hosts = get_hosts(pattern, ignore_restrictions=True)
    except TypeError:  # a manager without the keyword
        return None
    return set(host.name for host in hosts)


def set_in_run(hostvars):
    """A test ``host -> bool``: has this run set variables on the host (register, set_fact,
    include_vars; gathered facts where Ansible injects them as variables)? None when the
    variable manager behind ``hostvars`` does not tell."""
    manager = getattr(hostvars, "_variable_manager", None)
    registered = getattr(manager, "_nonpersistent_fact_cache", None)
    included = getattr(manager, "_vars_cache", None)
    has_facts = _has_facts(getattr(manager, "_fact_cache", None))
    if registered is None or included is None or has_facts is None:
        return None
    injected = C.INJECT_FACTS_AS_VARS

    def touched(host):
        return (
            bool(registered.get(host)) or bool(included.get(host)) or (injected and has_facts(host))
        )

    return touched


def names_set_in_run(hostvars):
    """A function ``host -> set of names`` of the variables this run has set on the host
    (register, set_fact, include_vars), or None when the variable manager does not tell."""
    manager = getattr(hostvars, "_variable_manager", None)
    registered = getattr(manager, "_nonpersistent_fact_cache", None)
    included = getattr(manager, "_vars_cache", None)
    if registered is None or included is None:
        return None

    def names(host):
        return set(registered.get(host) or ()) | set(included.get(host) or ())

    return names


def extra_vars(hostvars):
    """The run's extra variables (``-e``) as a mapping, or None when the variable manager does not tell."""
    manager = getattr(hostvars, "_variable_manager", None)
    try:
        found = manager.extra_vars
    except AttributeError:
        return None
    return found if isinstance(found, dict) or hasattr(found, "get") else None


def _has_facts(cache):
    """``host -> bool`` for the variable manager's fact cache, or None: a cache plugin itself
    (ansible-core >= 2.19: ``contains``, no ``in``) or the FactCache mapping of 2.17 and 2.18."""
    contains = getattr(cache, "contains", None)
    if callable(contains):
        return contains
    if hasattr(cache, "__contains__"):
        return cache.__contains__
    return None


def play_id(task):
    """An identifier of the play ``task`` belongs to, unique within the run; None when the task
    is outside a play's blocks or the play does not tell."""
    try:
        play = task.get_play()
    except AttributeError:
        return None
    return getattr(play, "_uuid", None)


def forks():
    """The run's ``--forks`` (hosts a task runs on at once), or None."""
    try:
        from ansible import context

        value = context.CLIARGS.get("forks")
    except (ImportError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None
