# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Which networks of one list overlap networks of another (playbooks/multicluster.yml refuses a
peer mesh whose allowed IPs overlap this mesh's: WireGuard would keep only one of the two)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: overlaps
short_description: The pairs of overlapping networks of two CIDR lists
version_added: 0.2.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - For each network of the input that overlaps a network of O(others) (same IP version), one line
    C(A overlaps B). Host bits are allowed (C(10.4.0.1/16) is C(10.4.0.0/16)).
positional: _input, others
options:
  _input:
    description: CIDRs.
    type: list
    elements: str
    required: true
  others:
    description: CIDRs to compare with.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse overlapping networks
  ansible.builtin.assert:
    that: (['10.4.0.1/32'] | kilo.mesh.overlaps(['10.4.0.0/16'])) == ['10.4.0.1/32 overlaps 10.4.0.0/16']
"""

RETURN = r"""
_value:
  description: One C(A overlaps B) line per overlapping pair, in input order; empty when none.
  type: list
  elements: str
"""

import ipaddress

from ansible.errors import AnsibleFilterError


def _networks(values, what):
    out = []
    for value in values or []:
        try:
            out.append((str(value), ipaddress.ip_network(str(value).strip(), strict=False)))
        except ValueError:
            raise AnsibleFilterError("overlaps: %s: %r is not a CIDR" % (what, value))
    return out


def overlaps(cidrs, others):
    theirs = _networks(others, "others")
    found = []
    for text, net in _networks(cidrs, "input"):
        for other_text, other in theirs:
            if net.version == other.version and net.overlaps(other):
                found.append("%s overlaps %s" % (text, other_text))
    return found


class FilterModule(object):
    def filters(self):
        return {"overlaps": overlaps}
