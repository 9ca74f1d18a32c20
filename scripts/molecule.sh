#!/usr/bin/env bash
# Molecule links its inventory to what `create` writes (.lab/klm/inventory.yml for `default`,
# .lab/kmk/k8s/ for `kubernetes`), and checks that the links' targets exist before `create`
# has run: give it empty ones until then. `make test` runs every scenario (`test --all`).
set -euo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.collections PATH=$PWD/.venv/bin:$PATH
mkdir -p .lab/klm
[ -s .lab/klm/inventory.yml ] || printf 'all: {}\n' > .lab/klm/inventory.yml
mkdir -p .lab/kmk/k8s/group_vars .lab/kmk/k8s/host_vars
exec molecule "${@:-test}"
