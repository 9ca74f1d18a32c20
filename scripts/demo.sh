#!/usr/bin/env bash
# `make demo`: a 3-location lab (3 hosts each, one public host per location, the third
# location behind NAT), site.yml against it, a connectivity matrix and the topology picture.
set -euo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.collections
PY=.venv/bin/python

echo "== lab: 3 locations x ${DEMO_HOSTS:-3} hosts, one public host each, location 3 behind NAT"
$PY lab/lab.py down >/dev/null 2>&1 || true
rm -f .lab/kilo-registry.json
$PY lab/lab.py up 3 "${DEMO_HOSTS:-3}" 1 --nat 3

echo "== ansible-playbook -i .lab/inventory.yml playbooks/site.yml"
.venv/bin/ansible-playbook -i .lab/inventory.yml playbooks/site.yml

echo "== plans and picture"
mkdir -p demo
.venv/bin/ansible-playbook -i .lab/inventory.yml playbooks/plan.yml -e plan_dot="$PWD/demo/topology.dot" \
  | sed -n '/"msg"\|msg:/,/^$/p'
dot -Tsvg demo/topology.dot -o demo/topology.svg
echo "picture: demo/topology.svg"

echo "== connectivity matrix (every host pings every other host's private address)"
$PY scripts/matrix.py

cat <<'TXT'
== done. Try:
  .venv/bin/ansible-playbook -i .lab/inventory.yml playbooks/site.yml --check --diff
  .venv/bin/python lab/lab.py exec aws-2 -- ip route
  make demo-down       # tear the lab down
TXT
