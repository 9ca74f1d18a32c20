#!/usr/bin/env bash
# Run a python3 script from this repo inside the kernel-test VM (Debian bookworm's kernel,
# with WireGuard and IPIP modules) and exit with the script's exit code.
#
#   tests/vm/run.sh [--pyroute2 pypi|debian] [--timeout SECONDS] [--systemd] SCRIPT [ARGS...]
#   (KV_KERNEL_ARGS: more kernel parameters, e.g. "loglevel=7" to see the kernel boot)
#
# --systemd boots the second image (build.sh KV_SYSTEMD=1) with systemd as PID 1; the script
# runs as the unit kv-test.service.
# For a test across reboots (with --systemd): --disk FILE (a raw disk kept across the run's
# boots, made when missing), --reboot (a reboot restarts the VM instead of ending the run),
# --net NS:TAP (qemu runs in netns NS with a virtio NIC on its tap TAP), --qmp SOCKET (QMP for
# the caller: RESET events), --out FILE (the script's serial output, followed live by the
# caller), --add SRC:DEST (a file or directory into the VM). tests/vm/reboot_run.py uses them.
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
disk= reboot=0 net= qmp= out= adds=()

usage() { sed -n '2,18s/^# \{0,1\}//p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --pyroute2) pyroute2=${2:?}; shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --systemd) systemd=1; shift ;;
    --disk) disk=${2:?}; shift 2 ;;
    --reboot) reboot=1; shift ;;
    --net) net=${2:?}; shift 2 ;;
    --qmp) qmp=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --add) adds+=("${2:?}"); shift 2 ;;
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
if [ -n "$disk" ] && [ "$systemd" != 1 ]; then echo "kv-run: --disk needs --systemd" >&2; exit 2; fi
case $net in ''|?*:?*) ;; *) echo "kv-run: --net takes NETNS:TAP, not '$net'" >&2; exit 2 ;; esac

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
for add in "${adds[@]}"; do
  dest=$layer/${add#*:}
  mkdir -p "$(dirname "$dest")"
  cp -r "${add%%:*}" "$dest"
done
{
  printf 'KV_SCRIPT=%q\n' "$script"
  [ -n "$disk" ] && printf 'KV_DISK=1\n'
  printf 'KV_PYTHONPATH=%q\n' "$pythonpath"
  printf 'KV_SYSTEMD=%q\n' "$systemd"
  printf 'KV_ARGS=('; [ $# -gt 0 ] && printf '%q ' "$@"; printf ')\n'
} >"$layer/kv/run.env"
(cd "$layer" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) | gzip -1 >"$run/layer.cpio.gz"
cat "$vm/base.cpio.zst" "$run/layer.cpio.gz" >"$run/initrd"

: >"$run/console.log"
out=${out:-$run/out.log}
: >"$out"
machine=(-nic none)
if [ -n "$net" ]; then
  # the caller made the tap in its namespace (and whatever lies behind it); only qemu runs there
  machine=(-netdev "tap,id=n0,ifname=${net#*:},script=no,downscript=no" -device virtio-net-pci,netdev=n0)
fi
[ -n "$disk" ] && { [ -f "$disk" ] || truncate -s 64M "$disk"; machine+=(-drive "file=$disk,if=virtio,format=raw"); }
accel=tcg
if [ "$reboot" = 1 ]; then
  # TCG keeps what it translated in boot 1 (1 GiB by default) and marks those guest pages as
  # code: the next kernel's initramfs unpack then writes through the slow path, 130 s instead
  # of 10 s here. A 64 MiB translation cache is flushed often enough to keep reboots fast.
  accel=tcg,tb-size=64
else
  machine+=(-no-reboot)
fi
[ -n "$qmp" ] && machine+=(-qmp "unix:$qmp,server=on,wait=off")
netns=()
[ -n "$net" ] && netns=(ip netns exec "${net%%:*}")
start=$SECONDS
echo "kv-run: booting Debian kernel (TCG) for $script, pyroute2=$pyroute2, timeout ${timeout}s" >&2
"${netns[@]}" qemu-system-x86_64 -accel "$accel" -cpu max -m "$memory" -smp 1 -nodefaults \
  -display none "${machine[@]}" \
  -kernel "$vm/vmlinuz" -initrd "$run/initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 net.ifnames=0 ${KV_KERNEL_ARGS:-}" \
  -serial "file:$run/console.log" -serial "file:$out" \
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

tr -d '\r' <"$out" >"$run/out.txt"
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
