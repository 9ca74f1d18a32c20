#!/usr/bin/env bash
# One-shot set-up for a fresh Debian/Ubuntu machine, run as root: Debian packages for the
# lab and the tests, the controller virtualenv .venv/, and the collection link that makes
# this checkout importable as ansible_collections.kilo.mesh.
#
#   scripts/setup.sh [all|demo|venv]
#
# all (make setup, make test): everything the tests need, the VM's and the API server's tools too.
# demo (make demo): what the lab and site.yml need, nothing of the test rig.
# venv (make plans): the controller virtualenv and the collection link alone.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}
case $MODE in all|demo|venv) ;; *) echo "setup: mode must be all, demo or venv, not '$MODE'" >&2; exit 2 ;; esac

APT_PACKAGES=()
if [ "$MODE" != venv ]; then
  APT_PACKAGES+=(
    wireguard-go wireguard-tools openssh-server openssh-client nftables iptables iproute2
    iputils-ping procps util-linux graphviz rsync python3 python3-venv
    # what the host-side modules import on the lab hosts (they share this machine's /usr)
    python3-pyroute2 python3-cryptography python3-yaml python3-apt
  )
fi
if [ "$MODE" = all ]; then
  APT_PACKAGES+=(
    # the lab's non-root login user becomes root with sudo (lab.py up --user; the hosts share /usr)
    sudo
    # what the agent (kilo_agent) imports on the lab hosts
    python3-kubernetes python3-prometheus-client
    # the kernel-backend test VM
    qemu-system-x86 debootstrap cpio zstd xz-utils kmod
    # the real CNI plugins (bridge, host-local, loopback) for the CNI test
    containernetworking-plugins
    # a shared registry for the job slicing test and the store's unit test (lab/redis_server.py
    # starts its own server on a free port; the package's service is not used)
    redis-server
  )
fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Controller Python: ansible-core 2.20 needs >= 3.12; Debian 12's python3 is 3.11, so take
# a 3.12/3.13 from PATH or pyenv. Hosts keep using /usr/bin/python3.
find_python() {
  # pyenv shims exist for versions that are not selected, so check that each one runs.
  local c
  for c in "${PYTHON:-}" \
           "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
           "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 \
           python3.12 python3.13; do
    [ -n "$c" ] || continue
    "$c" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1 && { command -v "$c"; return; }
  done
  return 1
}
# controller_venv DIR REQUIREMENTS [CONSTRAINTS]: the virtualenv DIR with REQUIREMENTS installed
# (versions from CONSTRAINTS where it names them). DIR/.requirements.txt keeps a copy of both
# files; the venv is installed again only when they changed.
controller_venv() {
  local dir=$1 want=$2 pins=${3:-} py
  local -a args=(-r "$want")
  [ -z "$pins" ] || args+=(-c "$pins")
  if [ -x "$dir/bin/python" ] && cmp -s <(cat "$want" $pins) "$dir/.requirements.txt"; then return; fi
  py=$(find_python) || { echo "setup: need Python >= 3.12 for the controller (set PYTHON=...)" >&2; exit 1; }
  echo "setup: controller virtualenv $dir with $py"
  [ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
  # (a venv cut short by an interrupted set-up has a python but no pip yet)
  [ -x "$dir/bin/pip" ] || "$dir/bin/python" -m ensurepip --default-pip >/dev/null
  # (this machine's pip.conf names local indexes that may be absent: hide those warnings only)
  "$dir/bin/pip" install -q --disable-pip-version-check "${args[@]}" 2>"$dir/pip.log" \
    || { grep -v "is ignored: it is neither" "$dir/pip.log" >&2; exit 1; }
  cat "$want" $pins >"$dir/.requirements.txt"
}
controller_venv .venv requirements.txt
# Make the checkout importable as ansible_collections.kilo.mesh (ansible.cfg points here).
mkdir -p .collections/ansible_collections/kilo
ln -sfn ../../.. .collections/ansible_collections/kilo/mesh
if [ "$MODE" != all ]; then echo "setup: done ($MODE)"; exit 0; fi
# The collections it depends on (galaxy.yml: kubernetes.core), beside it, from PyPI's ansible wheel
# (the demo's playbooks use none of it).
bash scripts/collections.sh

# The oldest and the newest ansible-core that meta/runtime.yml admits, each in a venv of its own
# for the test stages ansible-core-2.17 and ansible-core-2.21; every other version is .venv's.
for want in requirements-core-*.txt; do
  dir=.venv-core-${want#requirements-core-} dir=${dir%.txt}
  mkdir -p "$dir"
  grep -v '^ansible-core[=<>~! ]' requirements.txt >"$dir/.constraints.txt"
  controller_venv "$dir" "$want" "$dir/.constraints.txt"
done

# etcd, kube-apiserver, kubectl for tests/kube (.cache/kube, built once); the lab and the demo
# do not need them, so a failed build only warns here (the kubernetes test stage then fails).
bash scripts/kube.sh || echo "setup: WARNING: the Kubernetes API server build failed (see above)" >&2
echo "setup: done"
