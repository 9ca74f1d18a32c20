#!/bin/bash
# PID 1 of the kernel-test VM (installed as /init in the initramfs by build.sh).
# Mounts the kernel filesystems, loads WireGuard and IPIP, runs the script named in
# /kv/run.env (written by run.sh into the per-run layer), reports its exit code and powers off.
# Script output goes to the console (ttyS0) and, clean of kernel chatter, to ttyS1 which
# run.sh reads back; the last ttyS1 line is "KV-EXIT <code>".
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb KV_VM=1   # KV_VM: scripts may refuse to run elsewhere

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
echo 1 >/proc/sys/kernel/printk      # keep kernel notices off the console
hostname kv
ip link set lo up

out=/dev/ttyS1
stty -F "$out" raw -echo 2>/dev/null

off() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 30
}

if ! . /kv/run.env; then
  echo "KV-EXIT 125" >"$out"
  off
fi

for m in wireguard ipip; do
  modprobe "$m" || echo "kv-init: modprobe $m failed" >&2
done

export PYTHONPATH=$KV_PYTHONPATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
cd /opt/kilo/ansible_collections/kilo/mesh
python3 -c 'import sys, pyroute2, importlib.metadata as m
v = getattr(pyroute2, "__version__", "unknown")
v = m.version("pyroute2") if v == "unknown" else v
print("kv-init: python3 %d.%d.%d," % sys.version_info[:3], "pyroute2", v, "from", pyroute2.__path__[0])' 2>&1
echo "KV-BEGIN" >"$out"
python3 "$KV_SCRIPT" "${KV_ARGS[@]}" 2>&1 </dev/null | tee "$out"
rc=${PIPESTATUS[0]}
echo "kv-init: exit $rc"
echo "KV-EXIT $rc" >"$out"
off
