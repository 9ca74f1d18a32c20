# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The base of every action plugin of the collection.

One rule for every option (``module_utils/options.py``): the task argument, else the host's
inventory variable (``kilo_<name>``), else the table's default. A variable that does not
validate fails the task with a message naming the host and the variable. Expected failures
(``KiloError``) are caught here, once, and shown without a traceback.
"""

from __future__ import annotations

import copy
import difflib
import gc
import json
import os
import tempfile
from collections.abc import Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.options import (
    DEPRECATED_VARS,
    OPTIONS,
    argument_spec,
    out_of_bounds,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils import (
    agent_zip,
    ansible_internals,
    keepalive,
    plan_store,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import host_inputs
from ansible_collections.kilo.mesh.plugins.plugin_utils.mesh import MeshReading


def _copy(value):
    """A copy the caller may change: scalars (most option values) are immutable already."""
    return value if isinstance(value, (str, int, float, type(None))) else copy.deepcopy(value)


def _plain(value):
    """(JSON text, plain value) of an inventory value. The plain value drops what Ansible tags
    its values with (their origin), which the validator would otherwise deep-copy per value;
    a value JSON cannot carry unchanged is kept as it is."""
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return json.dumps(value, sort_keys=True, default=repr), value
    plain = json.loads(text)
    return text, (plain if plain == value else value)


def _out_of_bounds(parameters, given):
    """'name: why' of the first task argument outside its option's bounds, or None."""
    for name in sorted(given):
        why = out_of_bounds(name, parameters.get(name))
        if why:
            return "%s: %s" % (name, why)
    return None


# The prefix of the deprecated variables of the Kubernetes client options (options.DEPRECATED_VARS),
# kilo_kube_<option>: now the keys of kilo_kube.
CLIENT_VAR = OPTIONS["kube"]["var"] + "_"


def client_mapping(value, host):
    """The client options of a ``kilo_kube`` value (kubernetes.core's names; its aliases taken),
    checked: a mapping of known options of the right types, else a KiloError naming the host."""
    from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_client import (
        argument_spec as client_spec,
    )

    if value is None:
        return {}
    var = OPTIONS["kube"]["var"]
    spec = client_spec()
    if not isinstance(value, Mapping):
        raise KiloError(
            "a mapping of Kubernetes client options (%s), not %r"
            % (", ".join(spec), type(value).__name__),
            host_subject(host),
            var,
        )
    known = set(spec).union(*(spec[n].get("aliases") or () for n in spec))
    for key in sorted(value, key=str):
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), 1)
            raise KiloError(
                "unknown client option %r%s (known: %s)"
                % (key, " - did you mean %r?" % close[0] if close else "", ", ".join(spec)),
                host_subject(host),
                var,
            )
    validation = ArgumentSpecValidator(spec).validate(dict(value))
    error = _first_error(validation)
    if error:
        raise KiloError(error, host_subject(host), var)
    return dict(
        (n, v) for n, v in validation.validated_parameters.items() if n in spec and v is not None
    )


def _first_error(validation):
    errors = validation.errors
    return None if not errors else "; ".join(str(e) for e in errors)


class _Once(Mapping):
    """``source`` (a mapping) answering each key once: the answer (``wrap``ped) is kept for the
    rest of the action. Ansible's hostvars compute a host's variables anew on every
    ``hostvars[host]``, and its HostVarsVars template a value on every look-up."""

    def __init__(self, source, wrap=None):
        self._source = source
        self._wrap = wrap
        self._seen = {}

    def __getitem__(self, key):
        if key not in self._seen:
            value = self._source[key]
            self._seen[key] = self._wrap(value) if self._wrap else value
        return self._seen[key]

    def __contains__(self, key):
        return key in self._source

    def __iter__(self):
        return iter(self._source)

    def __len__(self):
        return len(self._source)


class HostVarsOnce(_Once):
    """``hostvars`` that computes each host's variables once per action run, and templates each
    of their values once: a run-once step over a thousand hosts would otherwise do both several
    times per host (validate reads each node variable three times). Within one action nothing
    changes a host's variables, so one answer serves."""

    def __init__(self, hostvars):
        super(HostVarsOnce, self).__init__(hostvars, wrap=_Once)
        self.inventory = ansible_internals.inventory_of(hostvars)  # for KiloAction.inventory

    def set_in_run(self):
        """ansible_internals.set_in_run of the hostvars behind this one."""
        return ansible_internals.set_in_run(self._source)

    def names_set_in_run(self):
        """ansible_internals.names_set_in_run of the hostvars behind this one."""
        return ansible_internals.names_set_in_run(self._source)

    def extra_vars(self):
        """ansible_internals.extra_vars of the hostvars behind this one."""
        return ansible_internals.extra_vars(self._source)

    def get(self, key, default=None):
        # Ansible's hostvars answer an unknown host with an undefined value, not KeyError
        return self[key] if key in self else default


class KiloAction(ActionBase):
    """Subclasses set SCOPES (option scopes), EXTRA_SPEC (their own options) and run_kilo."""

    TRANSFERS_FILES = False
    SCOPES = ()
    EXTRA_SPEC = {}

    def run(self, tmp=None, task_vars=None):
        # The worker is a fork of ansible-playbook holding the whole inventory: without this,
        # each garbage collection walks all of it again (at a thousand hosts, a run-once step
        # spent about a third of its time there). The worker exits after this task.
        gc.freeze()
        if getattr(self, "_requires_connection", True):
            keepalive.apply(self._connection)  # a dark host ends its call within keepalive.BOUND
        result = super().run(tmp, task_vars)
        if "hostvars" in task_vars and not isinstance(task_vars["hostvars"], HostVarsOnce):
            task_vars = dict(task_vars, hostvars=HostVarsOnce(task_vars["hostvars"]))
        try:
            args = self.options_of(task_vars)
            result.update(self.run_kilo(args, task_vars))
        except KiloError as e:
            result.update(
                failed=True, msg=str(e.about(host_subject(task_vars.get("inventory_hostname"))))
            )
        return self.with_deprecations(result)

    def with_deprecations(self, result):
        """``result`` with the deprecations this action met (``deprecate``)."""
        if self.__dict__.get("_deprecations"):
            result["deprecations"] = list(result.get("deprecations") or []) + self._deprecations
        return result

    def run_kilo(self, args, task_vars):
        raise NotImplementedError

    def _execute_module(self, *args, **kwargs):
        """Ansible's, and a host module that did not run as root (each says ``not_root`` first
        thing: the hosts need root, by root SSH or by become) fails the task with its message,
        naming the host."""
        result = super()._execute_module(*args, **kwargs)
        if result.get("not_root"):
            host = (kwargs.get("task_vars") or {}).get("inventory_hostname")
            raise KiloError(result.get("msg"), host_subject(host))
        return result

    # --- options ---------------------------------------------------------------------------

    def spec(self):
        spec = argument_spec(*self.SCOPES)
        spec.update(self.EXTRA_SPEC)
        return spec

    def options_of(self, task_vars, source=None, scopes=None):
        """The validated options: task argument > inventory variable (of ``source``, by
        default this host or the mesh's first host) > default. With ``scopes``: only the
        options of those scopes, from ``source``'s variables alone (the task's arguments are
        this action's own; kilo.mesh.connect reads the mesh's options from a mesh host).

        The task's arguments (with the defaults) are validated once per action, each variable
        alone, and a value seen before is not validated again: a run-once step reads the options
        of every host, and most hosts share most values (group variables)."""
        memo = self.__dict__.setdefault("_options_memo", {})
        kind = tuple(scopes) if scopes else None
        if ("spec", kind) not in memo:
            memo[("spec", kind)] = argument_spec(*scopes) if scopes else self.spec()
        spec = memo[("spec", kind)]
        given = {} if scopes else dict(self._task.args)
        known = set(spec).union(*(spec[name].get("aliases") or () for name in spec))
        unknown = sorted(set(given) - known)
        if unknown:
            raise KiloError(
                "unsupported option (supported: %s)" % ", ".join(sorted(spec)), "task", unknown[0]
            )
        source = source or self.vars_source(task_vars, given)
        # option -> its inventory variable, for the options the task leaves to the inventory
        var_of = dict(
            (name, OPTIONS[name]["var"])
            for name in spec
            if name not in given and name in OPTIONS and OPTIONS[name]["var"]
        )
        found = self.variables(task_vars, source, list(var_of.values()))
        if ("given", kind) not in memo:
            validation = ArgumentSpecValidator(spec).validate(given)
            parameters = validation.validated_parameters
            # the table's bounds (ports, MTU, ...), which Ansible's argument spec cannot say
            memo[("given", kind)] = (
                _first_error(validation) or _out_of_bounds(parameters, given),
                parameters,
            )
        error, options = memo[("given", kind)]
        if error:
            raise KiloError(error, "task")
        # copies: callers may change what they get, and the memo serves the next host
        options = dict((name, _copy(value)) for name, value in options.items())
        for name, var in var_of.items():
            if var not in found:
                continue
            text, value = _plain(found[var])
            key = (kind, name, text)
            if key not in memo:
                alone = ArgumentSpecValidator({name: spec[name]}).validate({name: value})
                checked = alone.validated_parameters.get(name)
                memo[key] = (_first_error(alone) or out_of_bounds(name, checked), checked)
            error, value = memo[key]
            options[name] = _copy(value)
            if error:
                # checked alone, so the message names the variable and the host it came from
                raise KiloError(error, host_subject(source), var)
        return options

    def variables(self, task_vars, host, names):
        """{name: templated value} of the inventory variables ``names`` that ``host`` has.

        One look-up of the host's variables for all names: every ``hostvars[host]`` access
        computes that host's variables anew, which at a thousand hosts is the run's cost."""
        if host == task_vars.get("inventory_hostname"):
            return dict(
                (name, self._templar.template(task_vars[name]))
                for name in names
                if name in task_vars
            )
        hostvars = task_vars["hostvars"]
        if host not in hostvars:
            return {}
        own = hostvars[host]
        return dict((name, own[name]) for name in names if name in own)

    def variable(self, task_vars, host, name):
        """(found, value) of inventory variable ``name`` of ``host``, templated."""
        found = self.variables(task_vars, host, [name])
        return (True, found[name]) if name in found else (False, None)

    def mesh(self, task_vars, args, **kwargs):
        """This action's reading of the mesh (``plugin_utils/mesh.py``; ``kwargs`` as MeshReading's)."""
        return MeshReading(self, task_vars, args, check_mode=self._task.check_mode, **kwargs)

    def listen_port(self, args, task_vars):
        """The UDP port this host's WireGuard listens on: the task's port, else where the engine
        makes the host listen (MeshReading.listen_port: its kilo_force_endpoint's port, else
        ``args["port"]``, kilo_port or the default as the option table filled it)."""
        if "port" in self._task.args:
            return args["port"]
        return self.mesh(task_vars, args).listen_port(
            task_vars.get("inventory_hostname"), args["port"]
        )

    @staticmethod
    def mesh_group(task_vars, given=None):
        return (
            (given or {}).get("group") or task_vars.get("kilo_group") or OPTIONS["group"]["default"]
        )

    def vars_source(self, task_vars, given=None):
        """Whose variables fill the options: this host; for a controller-only action in a
        play on a host outside the mesh (playbooks/plan.yml on localhost), the mesh group's
        first host. An action that runs on its host always reads that host's own."""
        if self._requires_connection:
            return task_vars.get("inventory_hostname")
        return self.mesh_source(task_vars, given)

    def mesh_source(self, task_vars, given=None):
        """This host when it is in the mesh group (or the group is empty), else the group's first host."""
        host = task_vars.get("inventory_hostname")
        members = task_vars.get("groups", {}).get(self.mesh_group(task_vars, given), [])
        return host if host in members or not members else members[0]

    @staticmethod
    def inventory(task_vars):
        """The InventoryManager behind ``hostvars`` (ansible_internals.inventory_of), or None."""
        hostvars = task_vars["hostvars"]
        return (
            hostvars.inventory
            if isinstance(hostvars, HostVarsOnce)
            else ansible_internals.inventory_of(hostvars)
        )

    @classmethod
    def location_groups(cls, task_vars, group):
        """host -> the child groups of ``group`` holding it (its location), or None when unknown.

        Action plugins see flat group lists only; the parent/child links are on the inventory
        behind ``hostvars`` (``inventory``).
        """
        inventory = cls.inventory(task_vars)
        if inventory is None:
            return None
        result = {}
        if group not in inventory.groups:
            return result
        for child in sorted(inventory.groups[group].child_groups, key=lambda g: g.name):
            for host in child.get_hosts():
                result.setdefault(host.name, []).append(child.name)
        return result

    def locations(self, task_vars, group, groups=None):
        """host -> location (the first child group of ``group`` holding it), or None when unknown;
        ``groups`` is ``location_groups()``'s answer when the caller already has it."""
        if groups is None:
            groups = self.location_groups(task_vars, group)
        return None if groups is None else dict((host, names[0]) for host, names in groups.items())

    # --- what validate read, for the topology step of the same play (plan_store) ---------------

    def _reading_key(self, group):
        play = ansible_internals.play_id(self._task)
        # None: a task outside a play's blocks, or a play that does not tell: nothing to share
        return None if play is None else "%s %s" % (play, group)

    def keep_reading(self, task_vars, group):
        """Keep the inputs of the mesh hosts outside the play (HostVarsOnce has them already)
        for a later step of this play (``earlier_reading``)."""
        key = self._reading_key(group)
        play = set(task_vars.get("ansible_play_hosts_all") or [])
        if key is None or not play:
            return
        hostvars = task_vars["hostvars"]
        plan_store.save_reading(
            key,
            dict(
                (host, host_inputs(hostvars[host]))
                for host in task_vars["groups"].get(group, [])
                if host not in play
            ),
        )

    def earlier_reading(self, task_vars, group):
        """host -> inputs of the mesh hosts outside the play, as ``keep_reading`` read them
        earlier in this play ({} when it did not). Never a host of the play, nor one this run
        has set variables on (an earlier play registered its key call, a set_fact delegated
        there): those are read again."""
        key = self._reading_key(group)
        touched = getattr(task_vars["hostvars"], "set_in_run", lambda: None)()
        if key is None or touched is None:
            return {}
        play = set(task_vars.get("ansible_play_hosts_all") or [])
        return dict(
            (host, inputs)
            for host, inputs in plan_store.load_reading(key).items()
            if host not in play and not touched(host)
        )

    def client_options(self, args, task_vars):
        """The Kubernetes client options (kubernetes.core's names) of an action that talks to the API:
        the task's own (``args``), each one it does not give from the variable ``kilo_kube`` (a
        mapping; the inventory plugin sets it to its own file's), else from the deprecated
        ``kilo_kube_<option>``; kube_client reads K8S_AUTH_* for what is still missing. The
        variables are this host's, or the mesh group's first host's for a host outside the mesh
        (kilo.mesh.peer on a connecting machine)."""
        from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_client import ENV

        source = self.mesh_source(task_vars)
        var = OPTIONS["kube"]["var"]
        found = self.variables(
            task_vars,
            source,
            [var] + [CLIENT_VAR + n for n in ENV if CLIENT_VAR + n in DEPRECATED_VARS],
        )
        given = client_mapping(found.get(var), source)
        options = dict((n, args.get(n)) for n in ENV)
        for name in ENV:
            if options[name] not in (None, ""):
                continue
            if given.get(name) not in (None, ""):
                options[name] = given[name]
            elif found.get(CLIENT_VAR + name) not in (None, ""):
                options[name] = found[CLIENT_VAR + name]
                self.deprecate(
                    "%s%s is deprecated: give the Kubernetes client options once, as kilo_kube: {%s: ...}"
                    " (the inventory plugin kilo.mesh.kubernetes sets kilo_kube from its own file)"
                    % (CLIENT_VAR, name, name)
                )
        return options

    def deprecate(self, msg, version="1.0.0"):
        """A deprecation warning in this task's result (Ansible shows it once per message)."""
        found = self.__dict__.setdefault("_deprecations", [])
        entry = dict(msg=msg, version=version, collection_name="kilo.mesh")
        if entry not in found:
            found.append(entry)

    def module_args(self, args, scopes):
        """The options of ``scopes`` out of ``args``, for a module call."""
        return dict((k, v) for k, v in args.items() if k in argument_spec(*scopes))

    # --- the collection's zip application on the host (the agent, the boot restore) ----------

    def run_with_app(self, module_name, module_args, task_vars, provide=None):
        """Run ``module_name`` with the digest of the collection's zip application (``app_digest``).

        A host whose copy differs answers ``need: ["app", ...]`` and changes nothing; the app is
        then sent (a file transfer into the task's temporary directory) and the module called
        again with ``app_src``, so a host that has it pays one remote call. ``provide(need)``
        returns further arguments for other needs (the agent's token). Returns (result, digest)."""
        data, digest = agent_zip.build()
        module_args = dict((k, v) for k, v in module_args.items() if v is not None)
        module_args["app_digest"] = digest
        result = self._execute_module(
            module_name=module_name, module_args=module_args, task_vars=task_vars
        )
        need = result.get("need") or []
        if need and not result.get("failed"):
            tmp = self._make_tmp_path()
            try:
                if "app" in need:
                    module_args["app_src"] = self._send_app(data, tmp)
                if provide:
                    module_args.update(provide(need))
                result = self._execute_module(
                    module_name=module_name, module_args=module_args, task_vars=task_vars
                )
            finally:
                self._remove_tmp_path(tmp)
        result.pop("need", None)
        return result, digest

    def converge(self, module_args, task_vars):
        """kilo.mesh.converge on the host; the app goes along where the boot restore keeps it."""
        if module_args.get("state") != "absent" and module_args.get("boot_restore", True):
            return self.run_with_app("kilo.mesh.converge", module_args, task_vars)[0]
        return self._execute_module(
            module_name="kilo.mesh.converge", module_args=module_args, task_vars=task_vars
        )

    def _send_app(self, data, tmp):
        """Copy the zip to the host's temporary directory; its path there."""
        fd, local = tempfile.mkstemp(prefix="kilo-mesh-agent.", suffix=".pyz")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            remote = self._connection._shell.join_path(tmp, "kilo-mesh-agent.pyz")
            self._transfer_file(local, remote)
            self._fixup_perms2((tmp, remote))
        finally:
            os.unlink(local)
        return remote
