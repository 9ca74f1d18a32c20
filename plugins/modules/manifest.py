#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: manifest
short_description: Apply or delete the objects of a Kubernetes manifest (the collection's CRD and RBAC)
version_added: 0.2.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Applies every object of a YAML manifest with server-side apply (field manager C(kilo-mesh)), or deletes them.
  - Written for C(playbooks/kubernetes.yml), which installs C(manifests/crds.yaml) and C(manifests/rbac.yaml);
    any kind the cluster serves works.
  - The server computes each object's result as a dry run first; an object whose result equals what is
    stored (status and server-written metadata aside) is not sent again, so a second run changes nothing.
  - C(List) objects are expanded; a namespaced object without a namespace goes to V(default).
  - Runs where the task runs, usually V(localhost); that Python needs the C(kubernetes) library.
options:
  src:
    description:
      - Path of a YAML file with one or more documents, on the host the module runs on.
      - Exactly one of O(src) and O(definition).
    type: path
  definition:
    description:
      - The objects themselves, a mapping, a list of them, or YAML text.
    type: raw
  state:
    description:
      - V(present) applies the objects; V(absent) deletes them (in reverse order).
    type: str
    choices: [present, absent]
    default: present
  wait:
    description:
      - After applying a C(CustomResourceDefinition), wait until the server reports it Established and
        serves its resource. Not in check mode.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait for each C(CustomResourceDefinition).
    type: int
    default: 60
extends_documentation_fragment:
  - kilo.mesh.kubernetes
attributes:
  check_mode:
    support: full
    description: Every change is made as a server-side dry run (schema, permissions checked); nothing is stored.
  diff_mode:
    support: full
    description: Each object that changes, before and after, without status and server-written metadata.
requirements:
  - kubernetes (the Kubernetes Python client) where the module runs
seealso:
  - module: kilo.mesh.peer
"""

EXAMPLES = r"""
- name: Install the Peer CRD of the collection
  kilo.mesh.manifest:
    src: "{{ playbook_dir }}/../manifests/crds.yaml"
    kubeconfig: ~/.kube/config

- name: Remove the RBAC objects again
  kilo.mesh.manifest:
    src: "{{ playbook_dir }}/../manifests/rbac.yaml"
    state: absent
"""

RETURN = r"""
objects:
  description: Each object of the manifest (C(Kind/name) or C(Kind/namespace/name)) and what was done to it.
  returned: always
  type: list
  elements: dict
  sample: [{"object": "CustomResourceDefinition/peers.kilo.squat.ai", "action": "created"},
           {"object": "ClusterRole/kilo-mesh", "action": "unchanged"}]
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import yaml
except ImportError:
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    YAML_IMPORT_ERROR = None

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError


def load(params):
    if params["src"]:
        try:
            with open(params["src"]) as f:
                return kube_client.manifest_objects(list(yaml.safe_load_all(f)), params["src"])
        except (OSError, yaml.YAMLError) as e:
            raise KiloError("cannot read: %s" % e, None, "src")
    definition = params["definition"]
    if isinstance(definition, str):
        try:
            definition = list(yaml.safe_load_all(definition))
        except yaml.YAMLError as e:
            raise KiloError("not YAML: %s" % e, None, "definition")
    return kube_client.manifest_objects(definition)


def main():
    argument_spec = dict(
        src=dict(type="path"),
        definition=dict(type="raw"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=60),
    )
    argument_spec.update(kube_client.argument_spec())
    module = AnsibleModule(
        argument_spec=argument_spec,
        required_one_of=[("src", "definition")],
        mutually_exclusive=[("src", "definition")],
        supports_check_mode=True,
    )
    if not kube_client.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=kube_client.KUBERNETES_IMPORT_ERROR)
    if YAML_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    params = module.params
    done, before, after = [], {}, {}
    try:
        objects = load(params)
        if params["state"] == "absent":
            objects.reverse()
        dyn = kube_client.dynamic_client(params)
        for obj in objects:
            key = kube_client.object_key(obj)
            action, old, new = kube_client.apply_object(dyn, obj, params["state"], module.check_mode)
            done.append(dict(object=key, action=action))
            if action != "unchanged":
                before[key] = kube_client.comparable(old)
                after[key] = kube_client.comparable(new)
            if (obj["kind"] == "CustomResourceDefinition" and params["state"] == "present" and params["wait"]
                    and not module.check_mode):
                kube_client.wait_established(dyn, obj["metadata"]["name"], params["wait_timeout"])
    except KiloError as e:
        module.fail_json(msg=str(e), objects=done)
    result = dict(changed=any(d["action"] != "unchanged" for d in done), objects=done)
    if module._diff:
        result["diff"] = dict(before=before, after=after)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
