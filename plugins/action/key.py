# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.key: fill the module's options from the inventory, then run it on the host.

With ``prepare`` the module first prepares the host in the same call. When it reports missing
packages, this action installs them through ansible.builtin.package's own action (so ``use``
picks apt, dnf or pacman as a package task would) and runs the key step once more: a host that
lacks nothing pays one remote call.

``state: absent`` (a task argument only) removes the key file and nothing else.

The module checks the host itself (port, subnet, forced internal IP); a host that reports no
usable address and has no forced endpoint fails here, before any converge call.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS, STATE_SPEC
from ansible_collections.kilo.mesh.plugins.plugin_utils import ansible_internals
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import facts_from_result
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import converged_together, some_of


class ActionModule(KiloAction):
    SCOPES = ("key", "prepare")
    EXTRA_SPEC = {"state": STATE_SPEC}

    def run_kilo(self, args, task_vars):
        if "state" not in self._task.args:
            # a task argument only: the table's kilo_state (a node leaving the mesh) never reaches it
            args["state"] = "present"
        if args["state"] == "absent":
            # the key file alone: no discovery, no preparation, no look at the mesh
            if self._task.args.get("prepare"):
                raise KiloError(
                    "removes the key; it prepares nothing (leave prepare out)", "task", "prepare"
                )
            return self._execute_module(
                module_name="kilo.mesh.key",
                task_vars=task_vars,
                module_args={"state": "absent", "key_path": args["key_path"]},
            )
        self.refuse_rotation_under_limit(args, task_vars)
        args["port"] = self.listen_port(args, task_vars)
        held = self.hold_rotation_under_limit(args, task_vars)
        result = self._execute_module(
            module_name="kilo.mesh.key", module_args=args, task_vars=task_vars
        )
        prepared = result.get("prepared")
        if prepared is not None and not result.get("failed"):
            prepared["installed"] = []
            if prepared.get("missing"):
                result = self.install_then_key(args, prepared, task_vars)
        if held:
            result["warnings"] = list(result.get("warnings") or []) + [held]
        if result.get("failed") or result.get("skipped"):
            return result
        self.refuse_unfinished_rotation(result, task_vars)
        host = task_vars.get("inventory_hostname")
        # this host's node as the mesh will make it from what the key step just reported
        node = self.mesh(task_vars, args).node(host, facts=facts_from_result(result))
        if node is None or not node.get("endpoint"):
            raise KiloError(
                "no usable address found by discovery (every address is loopback, link-local or on an"
                " ignored interface); set it or change kilo_discovery_ignore_interfaces",
                host_subject(host),
                "kilo_force_endpoint",
            )
        return result

    def left_out(self, task_vars):
        """Hosts of the mesh that would keep this host's old key if it switched in this run.

        A host of the mesh: those its play (or its batch) leaves out (--limit, serial). A machine
        connecting as a peer: those the run's --limit leaves out. Its play is the wrong measure:
        connect.yml makes its key in a play of connecting machines alone, and its mesh play holds
        every mesh host --limit admits (ansible_internals.limit_admits; when Ansible does not
        tell, every mesh host counts as left out, so the machine's key stays rather than being cut off).
        """
        group = self.mesh_group(task_vars)
        hosts = task_vars["groups"].get(group, [])
        if not hosts:
            return []
        if task_vars.get("inventory_hostname") in hosts:
            admitted = converged_together(task_vars)
        else:
            admitted = ansible_internals.limit_admits(self.inventory(task_vars), group) or set()
        return sorted(host for host in hosts if host not in admitted)

    def refuse_rotation_under_limit(self, args, task_vars):
        """kilo_key_rotate on a machine connecting as a peer, in a run whose --limit leaves hosts
        of the mesh out: refused before its key step changes anything (the leaders left out would
        keep its old key and cut it off). A mesh host's is refused earlier, by kilo.mesh.validate;
        a connecting machine's key step runs before validate does, in a play of its own."""
        host = task_vars.get("inventory_hostname")
        if not args.get("key_rotate") or host in task_vars["groups"].get(
            self.mesh_group(task_vars), []
        ):
            return
        outside = self.left_out(task_vars)
        if outside:
            raise KiloError(
                "this machine's key would rotate, but %s, left out of this run (--limit), would keep its"
                " old key and cut it off; rotate it in a run that leaves no host of the mesh out"
                % some_of(outside),
                host_subject(host),
                OPTIONS["key_rotate"]["var"],
            )

    def hold_rotation_under_limit(self, args, task_vars):
        """No rotation by age in a run that leaves hosts of the mesh out (--limit): they would keep
        this host's old key. The next full run rotates it (an explicit kilo_key_rotate is refused
        there: by kilo.mesh.validate on a mesh host, by refuse_rotation_under_limit on a machine
        connecting as a peer, before any host changes)."""
        if not args.get("key_max_age"):
            return None
        outside = self.left_out(task_vars)
        if not outside:
            return None
        args["key_max_age"] = 0
        return (
            "kilo_key_max_age is not applied in this run: %s, left out of this run (--limit), would keep this"
            " host's old key" % some_of(outside)
        )

    def refuse_unfinished_rotation(self, result, task_vars):
        """A rotation cut short earlier (the key file holds the new key, the interface the old one)
        finishes only in a run of every host: under --limit this host would switch and the hosts
        left out would cut it off. Its converge is refused; the interface keeps the old key."""
        outside = self.left_out(task_vars) if result.get("rotating") else []
        if outside:
            raise KiloError(
                "the key rotation of this host is unfinished (an earlier run was cut short) and %s, left"
                " out of this run (--limit), would keep its old key; finish it with a run of every host"
                " of the mesh" % some_of(outside),
                host_subject(task_vars.get("inventory_hostname")),
                "kilo_key_rotate",
            )

    def install_then_key(self, args, prepared, task_vars):
        """Install ``prepared["missing"]``, then the key step alone; one result for the task."""
        packages = list(prepared["missing"])
        installed = self.package(
            packages, prepared.get("pkg_mgr"), prepared.get("package_args"), task_vars
        )
        if installed.get("failed"):
            raise KiloError(
                "installing %s failed: %s"
                % (", ".join(packages), installed.get("msg", "no message")),
                host_subject(task_vars.get("inventory_hostname")),
                "install_packages",
            )
        result = self._execute_module(
            module_name="kilo.mesh.key", module_args=dict(args, prepare=False), task_vars=task_vars
        )
        if result.get("failed") and self._task.check_mode:
            result["msg"] = "check mode: %s not installed yet; %s" % (
                ", ".join(packages),
                result.get("msg"),
            )
        prepared.update(
            installed=packages if installed.get("changed") else [],
            changes=prepared.get("changes", []) + ["install %s" % ", ".join(packages)],
        )
        result["prepared"] = prepared
        result["changed"] = bool(
            result.get("changed") or installed.get("changed") or prepared.get("changes")
        )
        return result

    def package(self, names, pkg_mgr, package_args, task_vars):
        """ansible.builtin.package on this host (check mode and become as this task's)."""
        task = self._task.copy()
        task.args = dict(package_args or {}, name=names, state="present", use=pkg_mgr or "auto")
        action = self._shared_loader_obj.action_loader.get(
            "ansible.legacy.package",
            task=task,
            connection=self._connection,
            play_context=self._play_context,
            loader=self._loader,
            templar=self._templar,
            shared_loader_obj=self._shared_loader_obj,
        )
        return action.run(task_vars=task_vars)
