#!/usr/bin/env bash
# `make test`: every stage runs even when an earlier one fails, so one run shows all that
# is wrong; the last line counts the stages.
#
# Stages run in lanes: the stages of one lane one after another, the lanes side by side. The
# lab stages spend most of their time waiting (pings, handshakes, SSH round trips) and the VM
# stages keep one core busy (qemu -smp 1, TCG), so three lanes on two cores take about half the
# wall time of one. What shares a resource shares a lane: the VM stages share .build/vm*'s
# cached images, tests/core's lab prefix (kcr) is used by both ansible-core stages, and the API
# server stages (kubernetes, ansible-core-*, molecule's kubernetes scenario) each start a
# kube-apiserver on ports picked free, which two at once could pick alike. Labs of different
# stages never collide: every test file has a prefix of its own and lab.py claims management
# networks under a machine-wide lock.
#
# KILO_TEST_STAGES="a b" runs only those stages; KILO_TEST_LANES=1 runs every stage in one lane
# (the order below), as before lanes.
set -uo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_CONFIG=$PWD/ansible.cfg PATH=$PWD/.venv/bin:$PATH
export ANSIBLE_COLLECTIONS_PATH=$PWD/.collections
export PYTHONDONTWRITEBYTECODE=1

core_stage() {  # the command of the stage ansible-core-$1, run by .venv-core-$1's Python and Ansible
  echo "PATH=$PWD/.venv-core-$1/bin:\$PATH KILO_REQUIRE_KUBE=1 .venv-core-$1/bin/python -m pytest -q" \
       "-p no:cacheprovider tests/unit tests/core"
}
# lane|stage|command
stages=(
  # (tests/host/test_job_slicing.py, AWX job slicing, and tests/unit/plugins/plugin_utils/test_registry_store.py start a
  # redis-server of their own: Debian's redis-server, which scripts/setup.sh all installs)
  "labs|hosts|.venv/bin/python -m pytest -q -p no:cacheprovider tests/host"
  "kube|kubernetes|KILO_REQUIRE_KUBE=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/kube"
  # the oldest and newest ansible-core of meta/runtime.yml's range (scripts/setup.sh's venvs):
  # the unit tests and tests/core (every action and the inventory plugin on a small lab)
  "kube|ansible-core-2.17|$(core_stage 2.17)"
  "kube|ansible-core-2.21|$(core_stage 2.21)"
  "kube|molecule|env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH molecule test --all"
  "pure|unit|.venv/bin/python -m pytest -q -p no:cacheprovider tests/unit"
  "pure|sanity|bash scripts/sanity.sh"
  "pure|lint|bash scripts/lint.sh"
  # the lab itself (NAT kinds, addressing): short, so it leaves the long labs lane
  "pure|lab|.venv/bin/python -m pytest -q -p no:cacheprovider tests/lab"
  "vm|kernel-vm|bash tests/vm/run.sh tests/vm/kernel_backend_check.py"
  "vm|kernel-vm-debian-pyroute2|bash tests/vm/run.sh --pyroute2 debian tests/vm/kernel_backend_check.py"
  "vm|converge-vm-ipip|bash tests/vm/run.sh --pyroute2 debian tests/vm/converge_check.py"
  "vm|agent-unit-vm|bash tests/vm/run.sh --systemd --pyroute2 debian tests/vm/agent_unit_check.py"
  # three boots of one VM (converge, systemctl reboot, hard reset) with a WireGuard peer outside it
  "vm|reboot-vm|.venv/bin/python tests/vm/reboot_run.py"
)
# Which lane follows which: "pure" is short (a few minutes), so the VM stages come after it in
# the same lane; the lab and the API server lanes are the long ones.
lane_of() {
  case $1 in
    pure|vm) echo pure+vm ;;
    *) echo "$1" ;;
  esac
}
[ -n "${KILO_TEST_STAGES:-}" ] && echo "only stages: $KILO_TEST_STAGES"

logs=.build/test-logs
rm -rf "$logs"; mkdir -p "$logs"
: >"$logs/.print.lock"

# run_stage NAME CMD: the stage's output goes to its log, which is printed whole when the stage
# ends (under a lock, so lanes never interleave); its result line goes to $logs/NAME.result.
run_stage() {
  local name=$1 cmd=$2 start=$SECONDS rc
  echo "=== stage $name started (lane $(lane_of "$3"))"
  bash -c "$cmd" >"$logs/$name.log" 2>&1 </dev/null
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok      $name ($((SECONDS - start)) s)" >"$logs/$name.result"
  else
    echo "FAILED  $name ($((SECONDS - start)) s)" >"$logs/$name.result"
  fi
  (
    flock 9
    echo "=== stage $name: $cmd"
    cat "$logs/$name.log"
    echo "=== $(cat "$logs/$name.result")"
  ) 9>"$logs/.print.lock"
}

declare -A lane_stages=()
order=()
for stage in "${stages[@]}"; do
  lane=${stage%%|*} rest=${stage#*|}
  name=${rest%%|*}
  if [ -n "${KILO_TEST_STAGES:-}" ] && [[ " $KILO_TEST_STAGES " != *" $name "* ]]; then continue; fi
  order+=("$name")
  key=$(lane_of "$lane")
  [ "${KILO_TEST_LANES:-}" = 1 ] && key=one
  lane_stages[$key]+="$stage"$'\n'
done

pids=()
for key in "${!lane_stages[@]}"; do
  (
    while IFS= read -r stage; do
      [ -n "$stage" ] || continue
      lane=${stage%%|*} rest=${stage#*|}
      run_stage "${rest%%|*}" "${rest#*|}" "$lane"
    done <<<"${lane_stages[$key]}"
  ) &
  pids+=($!)
done
started=$SECONDS
wait "${pids[@]}"

passed=0 failed=0
echo "=== summary ($((SECONDS - started)) s with lanes)"
for name in "${order[@]}"; do
  line=$(cat "$logs/$name.result" 2>/dev/null || echo "FAILED  $name (no result)")
  echo "$line"
  case $line in ok*) passed=$((passed + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
