#!/usr/bin/env bash
# `make bench`: figures, not tests. Each line is `<what> key=value ... seconds=S`.
set -uo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.collections
echo "== topology engine (plans of every node)"
.venv/bin/python bench/bench_topology.py
echo "== lab"
.venv/bin/python bench/bench_lab.py
echo "== site.yml on the lab"
.venv/bin/python bench/bench_site.py
