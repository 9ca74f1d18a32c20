# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Firewall of a kilo.mesh node: NAT for mesh sources, forward accepts, IPIP filtering.

Runs on the host (no Ansible). Backends, chosen by settings['firewall']:
- 'nftables' (default): our own table `inet kilo_mesh`, replaced whole in ONE `nft -f -`
  transaction; nothing outside it is touched.
- 'iptables': chains KILO-NAT (nat), KILO-FORWARD and KILO-IPIP (filter) plus the jump rules into
  them, written with `iptables-restore --noflush` (one atomic commit per table), same for
  ip6tables. Whatever `iptables` is installed is used (Debian 12: iptables-nft).
- 'none': manage nothing.

Plan input (`plan['firewall']`, checked and normalised by ``plan.check_plan``): nat_sources,
nat_exempt_destinations, forward_accept, ipip_accept_sources, nat_destinations (own-segment
allowed-location-IPs: Kilo also NATs traffic *to* them so replies find their way back) and
ipip_filter (Kilo installs its IPIP filter whenever it encapsulates: other IPIP is dropped even
when no source is accepted), and beyond Kilo relay_accept (a relay of a mesh with unreachable
locations: forwarding from the WireGuard interface back into it is accepted and counted, first in
our forward chain: nft ``iifname W oifname W counter accept``, iptables ``-i W -o W -j ACCEPT``
first in KILO-FORWARD; ``relay_counter`` reads what it counted).

The implementation not selected may still hold our rules from an earlier run with another
`firewall` setting: ``current`` reads them as ``leftovers`` and apply/remove delete them.

Why no accept for the WireGuard UDP port: in nftables an accept in our table cannot overrule a
drop in another table (every base chain on a hook sees the packet), so it would only suggest an
openness it cannot give. Opening the port is left to the host's own firewall policy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import ipaddress
import json

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, run_checked
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import Backend
from ansible_collections.kilo.mesh.plugins.module_utils.plan import FIREWALL_LISTS

NFT = "nft"
IPTABLES = {4: "iptables", 6: "ip6tables"}
NFT_TABLE = "kilo_mesh"
NFT_FAMILY = "inet"
NAT_CHAIN = "KILO-NAT"
FORWARD_CHAIN = "KILO-FORWARD"
IPIP_CHAIN = "KILO-IPIP"
COMMENT = "kilo.mesh"
KINDS = ("nftables", "iptables")


class FirewallError(KiloError):
    """Clear, user-facing failure of the firewall backend."""


# Run a firewall tool: (rc, stdout, stderr); FirewallError when it is missing or exits with another code.
run = functools.partial(run_checked, error=FirewallError)


def normalize_lists(fw):
    """Collapse each list of a checked plan's firewall into sorted v4 and v6 networks (strings)."""
    out = {}
    for name in FIREWALL_LISTS:
        nets = {4: [], 6: []}
        for value in fw.get(name) or []:
            net = ipaddress.ip_network(value, strict=False)
            nets[net.version].append(net)
        for v in (4, 6):
            # overlapping elements are an error in an nft interval set; collapse first
            out[(name, v)] = [str(n) for n in sorted(ipaddress.collapse_addresses(nets[v]))]
    return out


# ------------------------------------------------------------------------- nftables
# A rule is modelled as a short canonical string (also what render shows). The same strings are
# produced from our model and parsed back from `nft -j`, so an unchanged run compares equal and a
# foreign edit inside our table shows up as a difference.
_SET_NAMES = {
    "nat_sources": "nat_src",
    "nat_destinations": "nat_dst",
    "nat_exempt_destinations": "nat_exempt",
    "forward_accept": "fwd",
    "ipip_accept_sources": "ipip_src",
}
_CHAINS = {
    # name: (type, hook, priority number, priority keyword)
    "postrouting": ("nat", "postrouting", 100, "srcnat"),
    "nat": None,
    "forward": ("filter", "forward", 0, "filter"),
    "input": ("filter", "input", 0, "filter"),
}
_FAM = {4: "ip", 6: "ip6"}
_L4_NAMES = {"ipencap": 4, "ipip": 4}


def relay_rule(interface):
    """Our nft forward rule of a relay (canonical text, also valid nft syntax)."""
    return 'meta iifname "%s" meta oifname "%s" counter accept' % (interface, interface)


def nft_model(lists, ipip_filter=False, relay=None):
    """Desired table as {'sets': {name: (type, [cidr])}, 'chains': {name: (base|None, [rule])}}.

    ``relay``: the WireGuard interface a relay forwards back into (``relay_accept``), else None.
    None when there is nothing to do (no table at all)."""
    if not any(lists.values()) and not ipip_filter and not relay:
        return None
    sets, chains = {}, {}
    for key, nets in sorted(lists.items()):
        name, v = key
        if nets:
            sets["%s_v%d" % (_SET_NAMES[name], v)] = ("ipv%d_addr" % v, list(nets))

    def have(name, v):
        return ("%s_v%d" % (_SET_NAMES[name], v)) in sets

    post, nat, fwd, inp = [], [], [], []
    if relay:
        # first: every relayed packet is counted, whatever the accepts after it would match
        fwd.append(relay_rule(relay))
    for v in (4, 6):
        f, s = _FAM[v], _SET_NAMES
        if have("nat_sources", v):
            post.append("%s saddr @%s_v%d jump nat" % (f, s["nat_sources"], v))
        if have("nat_destinations", v):
            post.append("%s daddr @%s_v%d jump nat" % (f, s["nat_destinations"], v))
        if have("nat_exempt_destinations", v):
            nat.append("%s daddr @%s_v%d return" % (f, s["nat_exempt_destinations"], v))
        if have("forward_accept", v):
            fwd.append("%s saddr @%s_v%d accept" % (f, s["forward_accept"], v))
            fwd.append("%s daddr @%s_v%d accept" % (f, s["forward_accept"], v))
        if have("ipip_accept_sources", v):
            inp.append("meta l4proto 4 %s saddr @%s_v%d accept" % (f, s["ipip_accept_sources"], v))
    if post:
        nat.append("masquerade")
        chains["postrouting"] = (_CHAINS["postrouting"][:3], post)
        chains["nat"] = (None, nat)
    if fwd:
        chains["forward"] = (_CHAINS["forward"][:3], fwd)
    if inp or ipip_filter:
        # Kilo: accept IPIP from own-segment nodes, drop any other IPIP
        inp.append("meta l4proto 4 drop")
        chains["input"] = (_CHAINS["input"][:3], inp)
    return {"sets": sets, "chains": chains}


def nft_script(model):
    """`nft -f` text replacing our table in one transaction (or deleting it when model is None)."""
    lines = [
        # declare first: deleting a table that does not exist would fail the whole batch
        "table %s %s" % (NFT_FAMILY, NFT_TABLE),
        "delete table %s %s" % (NFT_FAMILY, NFT_TABLE),
    ]
    if model is None:
        return "\n".join(lines) + "\n"
    lines.append("table %s %s {" % (NFT_FAMILY, NFT_TABLE))
    for name in sorted(model["sets"]):
        typ, elems = model["sets"][name]
        lines += [
            "\tset %s {" % name,
            "\t\ttype %s" % typ,
            "\t\tflags interval",
            "\t\telements = { %s }" % ", ".join(elems),
            "\t}",
        ]
    for name in ("postrouting", "nat", "forward", "input"):
        if name not in model["chains"]:
            continue
        base, rules = model["chains"][name]
        lines.append("\tchain %s {" % name)
        if base:
            kind, hook = base[0], base[1]
            lines.append(
                "\t\ttype %s hook %s priority %s; policy accept;" % (kind, hook, _CHAINS[name][3])
            )
        lines += ["\t\t%s" % r for r in rules]
        lines.append("\t}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _elem_nets(elem):
    """nft JSON set element -> list of ip_network."""
    if isinstance(elem, dict) and "elem" in elem:
        elem = elem["elem"].get("val")
    if isinstance(elem, str):
        return [ipaddress.ip_network(elem)]
    if isinstance(elem, dict) and "prefix" in elem:
        return [ipaddress.ip_network("%s/%s" % (elem["prefix"]["addr"], elem["prefix"]["len"]))]
    if isinstance(elem, dict) and "range" in elem:
        lo, hi = [ipaddress.ip_address(a) for a in elem["range"]]
        return list(ipaddress.summarize_address_range(lo, hi))
    raise ValueError("unknown set element %r" % (elem,))


def _expr_str(expr):
    """One nft JSON statement -> our canonical text; unknown shapes stay visible as JSON."""
    if not isinstance(expr, dict) or len(expr) != 1:
        return json.dumps(expr, sort_keys=True)
    ((kind, body),) = expr.items()
    if kind in ("accept", "drop", "return", "masquerade") and not body:
        return kind
    if kind == "counter":
        return "counter"  # its packets and bytes are live figures, not state
    if kind in ("jump", "goto") and isinstance(body, dict):
        return "%s %s" % (kind, body.get("target"))
    if kind == "match" and isinstance(body, dict) and body.get("op") in ("==", "in"):
        left, right = body.get("left"), body.get("right")
        if isinstance(left, dict) and "payload" in left:
            lhs = "%s %s" % (left["payload"].get("protocol"), left["payload"].get("field"))
        elif isinstance(left, dict) and "meta" in left:
            lhs = "meta %s" % left["meta"].get("key")
            if left["meta"].get("key") == "l4proto" and isinstance(right, str):
                right = _L4_NAMES.get(right, right)
            elif left["meta"].get("key") in ("iifname", "oifname") and isinstance(right, str):
                right = json.dumps(right)  # quoted, as nft takes any interface name
        else:
            return json.dumps(expr, sort_keys=True)
        if isinstance(right, dict) and "prefix" in right:
            right = "%s/%s" % (right["prefix"].get("addr"), right["prefix"].get("len"))
        if isinstance(right, (str, int)):
            return "%s %s" % (lhs, right)
    return json.dumps(expr, sort_keys=True)


def nft_parse(doc):
    """`nft -j list table` output -> model (same shape as nft_model), or None if absent."""
    model = {"sets": {}, "chains": {}}
    found = False
    for item in doc.get("nftables", []):
        if "table" in item:
            found = True
        elif "set" in item:
            s = item["set"]
            nets = []
            for e in s.get("elem", []):
                nets += _elem_nets(e)
            model["sets"][s["name"]] = (
                s.get("type"),
                [str(n) for n in sorted(ipaddress.collapse_addresses(nets))] if nets else [],
            )
        elif "chain" in item:
            c = item["chain"]
            base = None
            if "hook" in c:
                base = (c.get("type"), c.get("hook"), c.get("prio"))
                if c.get("policy", "accept") != "accept":
                    base = base + (c.get("policy"),)
            model["chains"].setdefault(c["name"], [base, []])[0] = base
        elif "rule" in item:
            r = item["rule"]
            text = " ".join(_expr_str(e) for e in r.get("expr", []))
            model["chains"].setdefault(r["chain"], [None, []])[1].append(text)
    if not found:
        return None
    model["chains"] = dict((k, (v[0], v[1])) for k, v in model["chains"].items())
    return model


def _model_lines(model):
    """Flat, sorted-where-order-does-not-matter text lines for diff and comparison."""
    if model is None:
        return []
    out = []
    for name in sorted(model["sets"]):
        typ, elems = model["sets"][name]
        out.append("set %s %s { %s }" % (name, typ, ", ".join(elems)))
    for name in sorted(model["chains"]):
        base, rules = model["chains"][name]
        head = "chain %s" % name
        if base:
            head += " (%s)" % " ".join(str(b) for b in base)
        out.append(head)
        out += ["chain %s: %s" % (name, r) for r in rules]
    return out


class _Nftables(object):
    """Our table ``inet kilo_mesh``; state: its model (``nft_model`` shape) or None when absent."""

    @staticmethod
    def current():
        rc, out, err = run([NFT, "-j", "list", "table", NFT_FAMILY, NFT_TABLE], ok_codes=(0, 1))
        if rc != 0:
            if "No such file or directory" in err:
                return None
            raise FirewallError(
                "%s list table %s %s failed: %s" % (NFT, NFT_FAMILY, NFT_TABLE, err.strip())
            )
        return nft_parse(json.loads(out))

    @staticmethod
    def desired(lists, ipip_filter=False, relay=None):
        return nft_model(lists, ipip_filter, relay)

    @staticmethod
    def relay_counter(interface):
        """(packets, bytes) the relay rule counted, or None without one."""
        rc, out, dummy = run(
            [NFT, "-j", "list", "chain", NFT_FAMILY, NFT_TABLE, "forward"], ok_codes=(0, 1)
        )
        if rc != 0:
            return None
        for item in json.loads(out).get("nftables", []):
            rule = item.get("rule")
            if rule and " ".join(_expr_str(e) for e in rule.get("expr", [])) == relay_rule(
                interface
            ):
                for e in rule["expr"]:
                    if isinstance(e, dict) and "counter" in e:
                        return e["counter"].get("packets", 0), e["counter"].get("bytes", 0)
        return None

    @staticmethod
    def apply(current, desired):
        run([NFT, "-f", "-"], stdin=nft_script(desired))

    @staticmethod
    def render(state):
        return _model_lines(state)

    @staticmethod
    def owns(state):
        return state is not None

    @staticmethod
    def remove(state):
        if state is not None:
            run([NFT, "delete", "table", NFT_FAMILY, NFT_TABLE])


# ------------------------------------------------------------------------- iptables
_IPT_TABLES = {
    # table: [(our chain, builtin chain it hangs off)]
    "nat": [(NAT_CHAIN, "POSTROUTING")],
    "filter": [(FORWARD_CHAIN, "FORWARD"), (IPIP_CHAIN, "INPUT")],
}
_OURS = (NAT_CHAIN, FORWARD_CHAIN, IPIP_CHAIN)
_CMT = '-m comment --comment "%s"' % COMMENT


def _ipt_norm(line):
    """Canonical form of an iptables-save rule line."""
    words = line.split()
    for i, w in enumerate(words):
        if w == "-p" and i + 1 < len(words) and words[i + 1] in ("ipencap", "ipip", "4"):
            words[i + 1] = "4"
    return " ".join(words)


def ipt_relay_rule(interface):
    """Our KILO-FORWARD rule of a relay, as iptables-save prints it."""
    return "-A %s -i %s -o %s %s -j ACCEPT" % (FORWARD_CHAIN, interface, interface, _CMT)


def ipt_model(lists, v, ipip_filter=False, relay=None):
    """{table: {'chains': {chain: [rule lines]}, 'jumps': [rule lines]}} for one IP version.

    ``relay``: the WireGuard interface a relay forwards back into, else None."""

    def nets(name):
        return lists.get((name, v)) or []

    model = {}
    nat_rules, nat_jumps = [], []
    for n in nets("nat_exempt_destinations"):
        nat_rules.append("-A %s -d %s %s -j RETURN" % (NAT_CHAIN, n, _CMT))
    for n in nets("nat_sources"):
        nat_jumps.append("-A POSTROUTING -s %s %s -j %s" % (n, _CMT, NAT_CHAIN))
    for n in nets("nat_destinations"):
        nat_jumps.append("-A POSTROUTING -d %s %s -j %s" % (n, _CMT, NAT_CHAIN))
    if nat_jumps:
        nat_rules.append("-A %s %s -j MASQUERADE" % (NAT_CHAIN, _CMT))
        model["nat"] = {"chains": {NAT_CHAIN: nat_rules}, "jumps": nat_jumps}
    filt = {"chains": {}, "jumps": []}
    fwd = [ipt_relay_rule(relay)] if relay else []
    for n in nets("forward_accept"):
        fwd.append("-A %s -s %s %s -j ACCEPT" % (FORWARD_CHAIN, n, _CMT))
        fwd.append("-A %s -d %s %s -j ACCEPT" % (FORWARD_CHAIN, n, _CMT))
    if fwd:
        filt["chains"][FORWARD_CHAIN] = fwd
        filt["jumps"].append("-A FORWARD %s -j %s" % (_CMT, FORWARD_CHAIN))
    ipip = ["-A %s -s %s %s -j ACCEPT" % (IPIP_CHAIN, n, _CMT) for n in nets("ipip_accept_sources")]
    if ipip or ipip_filter:
        ipip.append("-A %s %s -j DROP" % (IPIP_CHAIN, _CMT))
        filt["chains"][IPIP_CHAIN] = ipip
        filt["jumps"].append("-A INPUT -p 4 %s -j %s" % (_CMT, IPIP_CHAIN))
    if filt["chains"]:
        model["filter"] = filt
    return dict(
        (
            t,
            {
                "chains": dict((c, [_ipt_norm(x) for x in r]) for c, r in m["chains"].items()),
                "jumps": sorted(_ipt_norm(x) for x in m["jumps"]),
            },
        )
        for t, m in model.items()
    )


def ipt_parse(text):
    """iptables-save output -> same shape as ipt_model (only our chains and jumps)."""
    model, table = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":") and table:
            chain = line[1:].split()[0]
            if chain in _OURS:
                model.setdefault(table, {"chains": {}, "jumps": []})["chains"].setdefault(chain, [])
        elif line.startswith("-A ") and table:
            words = line.split()
            chain = words[1]
            target = words[words.index("-j") + 1] if "-j" in words[:-1] else None
            if chain in _OURS:
                model.setdefault(table, {"chains": {}, "jumps": []})["chains"].setdefault(
                    chain, []
                ).append(_ipt_norm(line))
            elif target in _OURS:
                model.setdefault(table, {"chains": {}, "jumps": []})["jumps"].append(
                    _ipt_norm(line)
                )
    for m in model.values():
        m["jumps"].sort()
    return model


def ipt_restore_script(table, have, want):
    """One atomic `iptables-restore --noflush` commit turning `have` into `want` for a table."""
    have = have or {"chains": {}, "jumps": []}
    want = want or {"chains": {}, "jumps": []}
    lines = ["*%s" % table]
    chains = [spec[0] for spec in _IPT_TABLES[table]]
    for c in chains:
        if c in want["chains"] or c in have["chains"]:
            lines.append(":%s - [0:0]" % c)  # creates it, or (with --noflush) flushes it
    for j in have["jumps"]:
        lines.append("-D" + j[2:])
    for c in chains:
        if c in want["chains"]:
            lines += want["chains"][c]
        elif c in have["chains"]:
            lines.append("-X %s" % c)
    # insert at the top so our accepts come before a foreign DROP (as Kilo prepends)
    for j in reversed(want["jumps"]):
        words = j.split()
        lines.append(" ".join(["-I", words[1], "1"] + words[2:]))
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


class _Iptables(object):
    """Our chains and jumps; state: {"ipv4": {table: model}, "ipv6": {...}} ({} per family when none)."""

    @staticmethod
    def _save(v, table):
        rc, out, err = run(["%s-save" % IPTABLES[v], "-t", table], ok_codes=(0, 1))
        if rc != 0:
            if v == 6:
                return ""  # IPv6 tables may be unavailable; only an error if we need them
            raise FirewallError("%s-save -t %s failed: %s" % (IPTABLES[v], table, err.strip()))
        return out

    def current(self):
        state = {}
        for v in (4, 6):
            fam = {}
            for table in _IPT_TABLES:
                fam.update(ipt_parse(self._save(v, table)))
            state["ipv%d" % v] = fam
        return state

    @staticmethod
    def desired(lists, ipip_filter=False, relay=None):
        # IPv4 only when forced: IPv6 tables may be missing and IPIP over IPv6 is not used here;
        # the relay rule in ip6tables only where the mesh has IPv6 (some list of that family)
        v6 = any(nets for (dummy, v), nets in lists.items() if v == 6)
        return dict(
            (
                "ipv%d" % v,
                ipt_model(lists, v, ipip_filter and v == 4, relay if v == 4 or v6 else None),
            )
            for v in (4, 6)
        )

    def relay_counter(self, interface):
        """(packets, bytes) the relay rule counted (IPv4 and IPv6 together), or None without one."""
        found = None
        for v in (4, 6):
            rc, out, dummy = run(["%s-save" % IPTABLES[v], "-c", "-t", "filter"], ok_codes=(0, 1))
            for line in out.splitlines() if rc == 0 else ():
                counts, sep, rule = line.partition(" ")
                if counts.startswith("[") and _ipt_norm(rule) == _ipt_norm(
                    ipt_relay_rule(interface)
                ):
                    packets, nbytes = counts.strip("[]").split(":")
                    found = tuple(a + int(b) for a, b in zip(found or (0, 0), (packets, nbytes)))
        return found

    @staticmethod
    def apply(current, desired):
        """One ``iptables-restore --noflush`` commit per table that differs."""
        for v in (4, 6):
            fam = "ipv%d" % v
            for table in _IPT_TABLES:
                have = current[fam].get(table)
                want = desired[fam].get(table)
                if have == want:
                    continue
                run(
                    ["%s-restore" % IPTABLES[v], "-w", "--noflush"],
                    stdin=ipt_restore_script(table, have, want),
                )

    @staticmethod
    def render(state):
        out = []
        for fam in ("ipv4", "ipv6"):
            for table in sorted(state.get(fam, {})):
                m = state[fam][table]
                for c in sorted(m["chains"]):
                    out.append("%s %s :%s" % (fam, table, c))
                    out += ["%s %s %s" % (fam, table, r) for r in m["chains"][c]]
                out += ["%s %s %s" % (fam, table, j) for j in m["jumps"]]
        return out

    @staticmethod
    def owns(state):
        return bool(state) and any(bool(v) for v in state.values())

    def remove(self, state):
        if self.owns(state):
            self.apply(state, {"ipv4": {}, "ipv6": {}})


_IMPLS = {"nftables": _Nftables, "iptables": _Iptables}


class FirewallBackend(Backend):
    """``converge.Backend`` for the firewall.

    State (``current``): ``{"kind": setting, "rules": model of the selected implementation (None
    for "none"), "leftovers": {other kind: its model}}`` where leftovers holds only an
    implementation that still has rules of ours (an earlier run with another ``firewall``).
    ``desired`` has the same shape with no leftovers.
    """

    name = "firewall"

    def __init__(self, settings, preshared_keys=None):
        super(FirewallBackend, self).__init__(settings)
        self.kind = settings["firewall"]
        if self.kind not in KINDS + ("none",):
            raise FirewallError(
                "%r is not one of %s" % (self.kind, ", ".join(KINDS + ("none",))),
                "options",
                "firewall",
            )
        self.impl = _IMPLS[self.kind]() if self.kind in _IMPLS else None
        self.others = dict(
            (kind, cls()) for kind, cls in sorted(_IMPLS.items()) if kind != self.kind
        )

    def _leftovers(self):
        found = {}
        for kind, impl in sorted(self.others.items()):
            try:
                state = impl.current()
            except FirewallError:
                continue  # that tool is missing or unusable here: nothing of ours can be in it
            if impl.owns(state):
                found[kind] = state
        return found

    def current(self, plan):
        """Our table or chains, and what the other implementation still holds of ours."""
        return {
            "kind": self.kind,
            "rules": self.impl.current() if self.impl else None,
            "leftovers": self._leftovers(),
        }

    def desired(self, plan, current):
        rules = None
        if self.impl:
            fw = plan["firewall"]
            rules = self.impl.desired(
                normalize_lists(fw),
                ipip_filter=fw["ipip_filter"],
                relay=self.interface if fw.get("relay_accept") else None,
            )
        return {"kind": self.kind, "rules": rules, "leftovers": {}}

    def changes(self, current, desired):
        out = [
            "firewall (%s): remove what an earlier run made with firewall=%s" % (kind, kind)
            for kind in sorted(current["leftovers"])
        ]
        if not self.impl or current["rules"] == desired["rules"]:
            return out
        before, after = self.impl.render(current["rules"]), self.impl.render(desired["rules"])
        lines = [
            "firewall (%s): remove %s" % (self.kind, line) for line in before if line not in after
        ]
        lines += [
            "firewall (%s): add %s" % (self.kind, line) for line in after if line not in before
        ]
        return out + (lines or ["firewall (%s): reorder rules" % self.kind])

    def apply(self, current, desired):
        if self.impl and current["rules"] != desired["rules"]:
            self.impl.apply(current["rules"], desired["rules"])
        self._remove_leftovers(current)

    def _remove_leftovers(self, current):
        for kind, state in sorted(current["leftovers"].items()):
            self.others[kind].remove(state)

    def diff(self, current, desired):
        """(before, after) of the selected implementation's rules; removing leaves none."""
        render = self.impl.render if self.impl else (lambda state: [])
        return render(current["rules"]), (render(desired["rules"]) if desired is not None else [])

    def owns(self, current):
        """Whether ``current`` holds a table or chain of ours (selected or left over)."""
        return bool(current["leftovers"]) or bool(self.impl and self.impl.owns(current["rules"]))

    def remove(self, current):
        self._remove_leftovers(current)
        if self.impl:
            self.impl.remove(current["rules"])

    def relay_counter(self):
        """(packets, bytes) forwarded by this relay's rule (``relay_accept``), or None without one."""
        return self.impl.relay_counter(self.interface) if self.impl else None
