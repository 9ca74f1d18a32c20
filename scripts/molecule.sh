#!/usr/bin/env bash
# A thin alias for Molecule's own command (`molecule test --all` with no arguments), run from the
# repository root with the virtualenv's bin on PATH: nothing else is needed, each scenario's
# molecule.yml (extensions/molecule/*/) sets Ansible's configuration itself.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- test --all
PATH=$PWD/.venv/bin:$PATH exec molecule "$@"
