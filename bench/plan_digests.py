#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The engine's output on every input the unit tests give it, as digests: proof that a change of
the engine's inside leaves its behaviour as it was.

``record FILE``: run tests/unit with every ``Topology`` construction recorded (nodes, peers,
options: the inputs of build_plans, peer_config, showconf, connect, validate's check), plus
``--random N`` meshes of the reference generator (tests/unit/plugins/module_utils/engine/test_topology_reference.py) and of
the dual-stack one; the distinct inputs go to FILE (pickle).

``compare FILE [REV]``: for every input, the digest of everything the engine gives of it (every
plan, each node's plan alone, each peer's config, the conflicts check, showconf of each leader,
node_segment of each node, the DOT graph; an error by its type, message, subject and field),
computed by the working tree and by commit REV (default: main), each in its own process; prints
the counts and the inputs that differ. Exit 1 when any does.
"""

import copy
import hashlib
import json
import os
import pickle
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _collections(path):
    sys.path.insert(0, path)


# --- record ---------------------------------------------------------------------------------------


class Recorder(object):
    """A pytest plugin: every Topology(nodes, peers, options) the tests make, kept once."""

    def __init__(self):
        self.inputs, self.seen = [], set()

    def add(self, nodes, peers, options, now=None):
        try:
            item = copy.deepcopy(
                (
                    list(nodes) if isinstance(nodes, (list, tuple)) else nodes,
                    list(peers or []) if isinstance(peers, (list, tuple)) else peers,
                    dict(options) if isinstance(options, dict) else options,
                )
                + ((now,) if now else ())
            )
            data = pickle.dumps(item, protocol=4)
        except Exception:  # pylint: disable=broad-except  # an input that cannot be kept (a mock)
            return
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self.seen:
            self.seen.add(digest)
            self.inputs.append(data)

    def pytest_configure(self, config):  # pylint: disable=unused-argument
        from ansible_collections.kilo.mesh.plugins.module_utils.engine import topology

        original = topology.Topology.__init__
        recorder = self

        def init(self, nodes, peers, options=None, *args, **kwargs):
            recorder.add(nodes, peers, options, args[0] if args else kwargs.get("now"))
            return original(self, nodes, peers, options, *args, **kwargs)

        topology.Topology.__init__ = init


def random_inputs(count):
    """``count`` meshes of the reference generator beyond the tests' seeds, each also under the
    options the generator leaves out (granularity cross, the add-on compatibilities)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
    import test_topology_reference as reference  # pylint: disable=import-error

    out = []
    for seed in range(1000, 1000 + count):
        rnd = random.Random(seed)
        nodes, peers, options = reference.random_mesh(rnd)
        out.append((nodes, peers, options))
        extra = dict(
            options,
            granularity=rnd.choice(["location", "full", "cross"]),
            compatibility=rnd.choice(["none", "flannel", "cilium"]),
        )
        out.append((nodes, peers, extra))
        # two nodes of one location at one internal IP (Kilo computes it; validate refuses it)
        twins = copy.deepcopy(nodes)
        same = [n for n in twins if n["location"] == twins[0]["location"] and n["internal_ip"]]
        if len(same) > 1:
            same[-1]["internal_ip"] = same[0]["internal_ip"]
            out.append(
                (
                    twins,
                    peers,
                    dict(options, encapsulate=rnd.choice(["always", "never"]), local=True),
                )
            )
    return out


def record(path, count):
    import pytest

    _collections(os.path.join(ROOT, ".collections"))
    recorder = Recorder()
    code = pytest.main(
        ["-q", "-x", "-p", "no:cacheprovider", os.path.join(ROOT, "tests", "unit")],
        plugins=[recorder],
    )
    for nodes, peers, options in random_inputs(count):
        recorder.add(nodes, peers, options)
    with open(path, "wb") as f:
        pickle.dump(recorder.inputs, f, protocol=4)
    print(
        "recorded %d distinct engine inputs (tests/unit exit %s, %d random meshes each generator)"
        % (len(recorder.inputs), code, count)
    )
    return 0 if code == 0 else 1


# --- digests --------------------------------------------------------------------------------------


def _outcome(call):
    try:
        return ["ok", call()]
    except Exception as e:  # pylint: disable=broad-except
        return [
            "error",
            type(e).__name__,
            str(e),
            getattr(e, "kind", None),
            getattr(e, "name", None),
            getattr(e, "field", None),
        ]


def _plain(result):
    """``build_plans``' result with its plans in a dict, whatever mapping the engine gives them in."""
    return dict(result, plans=dict(result["plans"]))


def everything(nodes, peers, options, now=None):
    """All the engine gives of one input (JSON-able); ``now``: the time of the timed inputs (relays)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.engine import topology as engine
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.conflicts import check_conflicts
    from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import showconf

    try:
        from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import to_dot
    except ImportError:  # a commit before engine/topology_graph.py became engine/graph.py
        from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology_graph import to_dot

    timed = {"now": now} if now is not None else {}
    out = {"all": _outcome(lambda: engine.build_plans(nodes, peers, options, **timed))}
    if out["all"][0] != "ok":
        return out
    # plans rendered when asked (the engine's Plans), outside the outcome: a plan refusing only
    # when it is rendered would fail here, not pass as the same refusal
    result = out["all"][1] = _plain(out["all"][1])
    out["dot"] = _outcome(lambda: to_dot(result))
    out["conflicts"] = _outcome(
        lambda: check_conflicts(engine.Topology(nodes, peers or [], options), peers)
    )
    names = sorted(result["plans"])
    few = names if len(names) <= 40 else names[:5] + names[-5:]
    out["only"] = dict(
        (
            name,
            _outcome(
                lambda: dict(
                    engine.build_plans(nodes, peers, options, only=[name], **timed)["plans"]
                )
            ),
        )
        for name in few
    )
    out["segment"] = dict(
        (item["name"], _outcome(lambda: engine.node_segment(item, options)))
        for item in (nodes if len(nodes) <= 40 else [])
    )
    out["peer_config"] = dict(
        (p["name"], _outcome(lambda: engine.peer_config(nodes, peers, p["name"], options)))
        for p in (peers or [])[:10]
    )
    leaders = sorted(set(seg["leader"] for seg in result["segments"]))[:5]
    out["showconf"] = dict(
        (
            name,
            [
                _outcome(lambda: showconf(nodes, peers, options, node=name)),
                _outcome(
                    lambda: showconf(nodes, peers, options, node=name, as_peer=True, output="json")
                ),
            ],
        )
        for name in leaders
    )
    return out


def digests(path):
    """One digest per recorded input, in order (this process's tree)."""
    with open(path, "rb") as f:
        inputs = pickle.load(f)
    out = []
    for data in inputs:
        text = json.dumps(everything(*pickle.loads(data)), sort_keys=True, default=repr)
        out.append(hashlib.sha256(text.encode()).hexdigest())
    return out


def tree_digests(path, collections):
    text = subprocess.check_output(
        [sys.executable, os.path.abspath(__file__), "digests", path, collections],
        universal_newlines=True,
    )
    return json.loads(text)


def compare(path, rev):
    import base_tree  # pylint: disable=import-error

    with base_tree.checkout(rev) as base:
        theirs = tree_digests(path, base)
    ours = tree_digests(path, base_tree.WORK)
    same = sum(1 for a, b in zip(theirs, ours) if a == b)
    whole = [hashlib.sha256("".join(d).encode()).hexdigest()[:16] for d in (theirs, ours)]
    print(
        "inputs=%d equal=%d differ=%d  all-inputs digest %s=%s work=%s"
        % (len(ours), same, len(ours) - same, base_tree.describe(rev), whole[0], whole[1])
    )
    for index, (a, b) in enumerate(zip(theirs, ours)):
        if a != b:
            print("differs: input #%d" % index)
    return 0 if same == len(ours) == len(theirs) else 1


def main(argv):
    if argv[:1] == ["record"] and len(argv) >= 2:
        count = int(argv[3]) if argv[2:3] == ["--random"] else 300
        return record(argv[1], count)
    if argv[:1] == ["digests"] and len(argv) == 3:
        _collections(argv[2])
        print(json.dumps(digests(argv[1])))
        return 0
    if argv[:1] == ["compare"] and len(argv) in (2, 3):
        sys.path.insert(0, HERE)
        return compare(argv[1], argv[2] if len(argv) == 3 else "main")
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
