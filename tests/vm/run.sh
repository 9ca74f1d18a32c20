#!/usr/bin/env bash
# Run a python3 script from this repo inside the kernel-test VM (Debian bookworm's kernel,
# with WireGuard and IPIP modules) and exit with the script's exit code.
#
#   tests/vm/run.sh [--pyroute2 pypi|debian] [--timeout SECONDS] [--systemd] SCRIPT [ARGS...]
#
# --systemd boots the second image (build.sh KV_SYSTEMD=1) with systemd as PID 1; the script
# runs as the unit kv-test.service.
# SCRIPT is a path relative to the repo root. In the VM the repo's plugins/ tree sits at
# /opt/kilo/ansible_collections/kilo/mesh/plugins, PYTHONPATH=/opt/kilo, and the script runs
# as root from the collection root (same relative path as here). --pyroute2 pypi (default)
# puts pyroute2 0.9.7 first on PYTHONPATH; --pyroute2 debian uses Debian's python3-pyroute2
# 0.7.2, which real bookworm hosts run. The VM has no network card: nothing leaves it.
# The console streams to stdout; the last line printed is the script's "N passed, N failed".
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
systemd=0
pyroute2=pypi
timeout=${KV_TIMEOUT:-600}
memory=${KV_MEMORY:-1024}

usage() { sed -n '2,12s/^# \{0,1\}//p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --pyroute2) pyroute2=${2:?}; shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --systemd) systemd=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "kv-run: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
script=$1; shift
case $pyroute2 in
  pypi) pythonpath=/opt/kv-pyroute2:/opt/kilo ;;
  debian) pythonpath=/opt/kilo ;;
  *) echo "kv-run: --pyroute2 must be pypi or debian, not '$pyroute2'" >&2; exit 2 ;;
esac
if [ "$systemd" = 1 ]; then vm=${KV_VM_DIR:-$repo/.build/vm-systemd}; else vm=${KV_VM_DIR:-$repo/.build/vm}; fi
script=${script#./}
[ -f "$repo/$script" ] || { echo "kv-run: no script $repo/$script" >&2; exit 2; }
case $script in /*|*..*) echo "kv-run: SCRIPT must be a path inside the repo, relative to its root" >&2; exit 2 ;; esac

KV_SYSTEMD=$systemd "$here/build.sh"

run=$(mktemp -d "$vm/run.XXXXXX")
qpid= tpid=
cleanup() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null || true
  [ -n "$tpid" ] && kill "$tpid" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Per-run layer: the project code and the script, appended to the cached base initramfs
# (the kernel unpacks concatenated archives in order, later files win).
layer=$run/layer
coll=$layer/opt/kilo/ansible_collections/kilo/mesh
mkdir -p "$coll" "$layer/kv" "$coll/$(dirname "$script")"
tar -C "$repo" --exclude=__pycache__ --exclude='*.pyc' -cf - plugins | tar -C "$coll" -xf -
# The script and its sibling .py helpers, at the same relative path.
find "$repo/$(dirname "$script")" -maxdepth 1 -name '*.py' -exec cp {} "$coll/$(dirname "$script")/" \;
{
  printf 'KV_SCRIPT=%q\n' "$script"
  printf 'KV_PYTHONPATH=%q\n' "$pythonpath"
  printf 'KV_SYSTEMD=%q\n' "$systemd"
  printf 'KV_ARGS=('; [ $# -gt 0 ] && printf '%q ' "$@"; printf ')\n'
} >"$layer/kv/run.env"
(cd "$layer" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) | gzip -1 >"$run/layer.cpio.gz"
cat "$vm/base.cpio.zst" "$run/layer.cpio.gz" >"$run/initrd"

: >"$run/console.log"
: >"$run/out.log"
start=$SECONDS
echo "kv-run: booting Debian kernel (TCG) for $script, pyroute2=$pyroute2, timeout ${timeout}s" >&2
qemu-system-x86_64 -accel tcg -cpu max -m "$memory" -smp 1 -nodefaults -no-reboot \
  -display none -nic none \
  -kernel "$vm/vmlinuz" -initrd "$run/initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 net.ifnames=0" \
  -serial "file:$run/console.log" -serial "file:$run/out.log" \
  </dev/null >"$run/qemu.log" 2>&1 &
qpid=$!
tail -n +1 -f --pid="$qpid" "$run/console.log" | tr -d '\r' &
tpid=$!

timed_out=0
while kill -0 "$qpid" 2>/dev/null; do
  if [ $((SECONDS - start)) -ge "$timeout" ]; then
    echo "kv-run: timeout after ${timeout}s, killing qemu (pid $qpid)" >&2
    kill "$qpid" 2>/dev/null || true
    sleep 2
    kill -9 "$qpid" 2>/dev/null || true
    timed_out=1
    break
  fi
  sleep 1
done
wait "$qpid" 2>/dev/null || true
qpid=
wait "$tpid" 2>/dev/null || true
tpid=
[ -s "$run/qemu.log" ] && sed 's/^/qemu: /' "$run/qemu.log" >&2

tr -d '\r' <"$run/out.log" >"$run/out.txt"
rc=$(sed -n 's/^KV-EXIT \([0-9]\{1,3\}\)$/\1/p' "$run/out.txt" | tail -1)
summary=$(grep -E '^([A-Za-z_-]+: )?[0-9]+ passed, [0-9]+ failed' "$run/out.txt" | tail -1 || true)
echo "kv-run: VM finished in $((SECONDS - start))s" >&2
if [ -z "$rc" ]; then
  if [ "$timed_out" = 1 ]; then rc=124; else rc=125; fi
  echo "kv-run: the VM gave no exit code for $script (timeout=$timed_out); see console above" >&2
fi
if [ -n "$summary" ]; then
  echo "$summary"
else
  echo "kv-run: $script printed no 'N passed, N failed' line (exit $rc)"
fi
exit "$rc"
