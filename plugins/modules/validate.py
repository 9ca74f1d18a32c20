#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: validate
short_description: Check the whole Kilo mesh on the controller before any host changes
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Reads every host of the mesh group the way M(kilo.mesh.join) and M(kilo.mesh.key) will, and fails
    with the host and the inventory variable named when one does not validate.
  - Mesh-wide settings (Kilo's flags, the group, the registry, the peers) must be the same on every host.
  - Computes the topology of every host known so far (this run's facts, the registry, pinned keys and
    endpoints), so duplicate keys, a subnet too small for the segments or a location without any
    endpoint fail here, before any host is touched.
  - Runs on the controller only (an action plugin); C(playbooks/site.yml) calls it once, first.
extends_documentation_fragment:
  - kilo.mesh.options.mesh
  - kilo.mesh.options.inputs
  - kilo.mesh.options.host
  - kilo.mesh.options.key
  - kilo.mesh.options.prepare
  - kilo.mesh.options.run
attributes:
  check_mode:
    support: full
    description: Checks only; nothing is changed in either mode.
  diff_mode:
    support: none
    description: Returns no differences.
seealso:
  - module: kilo.mesh.join
  - module: kilo.mesh.topology
"""

EXAMPLES = r"""
- name: Check the whole mesh before any host changes
  kilo.mesh.validate:
  run_once: true
"""

RETURN = r"""
hosts:
  description: Hosts of the mesh group.
  returned: success
  type: int
nodes:
  description: Hosts known with a key and an endpoint (the rest join once they have run kilo.mesh.key).
  returned: success
  type: int
missing:
  description:
    - Hosts not known yet that this play does not reach (outside the play or C(--limit)), or that leave the
      mesh. They are left out, with a warning, until they have run M(kilo.mesh.key).
  returned: when some are missing
  type: list
  elements: str
joining:
  description:
    - Hosts not known yet that are hosts of this play with O(state=present) (C(kilo_state)). The play's
      M(kilo.mesh.key) step reports their key and addresses later in this run (as in C(playbooks/site.yml)),
      so they are not warned of here. One that fails that step is warned of by M(kilo.mesh.topology).
  returned: when some are joining
  type: list
  elements: str
"""
