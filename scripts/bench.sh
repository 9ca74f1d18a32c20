#!/usr/bin/env bash
# `make bench`: figures, not tests. Each line is `<what> key=value ... seconds=S`.
set -uo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.collections
echo "== topology engine (plans of every node, one node's plan; each size in a fresh process; BENCH_BASE=<commit> beside it)"
.venv/bin/python bench/bench_topology.py
echo "== lab"
.venv/bin/python bench/bench_lab.py
echo "== site.yml on the lab (BENCH_BIG=1 adds 10x10)"
.venv/bin/python bench/bench_site.py
echo "== site.yml on 6 lab hosts, alone and inside a 1,000-host mesh"
.venv/bin/python bench/bench_mesh.py
echo "== host read beside 100,000 foreign routes (first converge and re-run; needs root)"
.venv/bin/python bench/bench_netstate.py 100000
echo "== agent mode: stopwatches on a 2x2 lab, then one agent's cost among 1,000 Nodes (needs root)"
.venv/bin/python bench/bench_agent.py
echo "== agent mode: a leader dark, a leader not forwarding: p50/p95 of the time its location is cut off (needs root)"
.venv/bin/python bench/bench_failover.py
echo "== agent mode behind symmetric NATs: the NAT'd pair relayed for 300 s, no flapping (needs root)"
.venv/bin/python bench/bench_symmetric.py
