#!/usr/bin/env bash
# `make test`: every stage runs even when an earlier one fails, so one run shows all that
# is wrong; the last line counts the stages.
set -uo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_CONFIG=$PWD/ansible.cfg PATH=$PWD/.venv/bin:$PATH
export ANSIBLE_COLLECTIONS_PATH=$PWD/.collections
export PYTHONDONTWRITEBYTECODE=1

core_stage() {  # the command of the stage ansible-core-$1, run by .venv-core-$1's Python and Ansible
  echo "PATH=$PWD/.venv-core-$1/bin:\$PATH KILO_REQUIRE_KUBE=1 .venv-core-$1/bin/python -m pytest -q" \
       "-p no:cacheprovider tests/unit tests/core"
}
stages=(
  "unit|.venv/bin/python -m pytest -q -p no:cacheprovider tests/unit"
  "sanity|bash scripts/sanity.sh"
  "lint|.venv/bin/ansible-lint --profile production -q"
  "hosts|.venv/bin/python -m pytest -q -p no:cacheprovider tests/lab tests/host"
  "kubernetes|KILO_REQUIRE_KUBE=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/kube"
  # the oldest and newest ansible-core of meta/runtime.yml's range (scripts/setup.sh's venvs):
  # the unit tests and tests/core (every action and the inventory plugin on a small lab)
  "ansible-core-2.17|$(core_stage 2.17)"
  "ansible-core-2.21|$(core_stage 2.21)"
  "kernel-vm|bash tests/vm/run.sh tests/vm/kernel_backend_check.py"
  "kernel-vm-debian-pyroute2|bash tests/vm/run.sh --pyroute2 debian tests/vm/kernel_backend_check.py"
  "converge-vm-ipip|bash tests/vm/run.sh --pyroute2 debian tests/vm/converge_check.py"
  "agent-unit-vm|bash tests/vm/run.sh --systemd --pyroute2 debian tests/vm/agent_unit_check.py"
  "molecule|env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH molecule test --all"
)
[ -n "${KILO_TEST_STAGES:-}" ] && echo "only stages: $KILO_TEST_STAGES"

passed=0 failed=0 summary=()
for stage in "${stages[@]}"; do
  name=${stage%%|*} cmd=${stage#*|}
  if [ -n "${KILO_TEST_STAGES:-}" ] && [[ " $KILO_TEST_STAGES " != *" $name "* ]]; then continue; fi
  echo "=== stage $name: $cmd"
  start=$SECONDS
  if bash -c "$cmd"; then
    passed=$((passed + 1)); summary+=("ok      $name ($((SECONDS - start)) s)")
  else
    failed=$((failed + 1)); summary+=("FAILED  $name ($((SECONDS - start)) s)")
  fi
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
