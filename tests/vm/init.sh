#!/bin/bash
# PID 1 of the kernel-test VM (installed as /init in the initramfs by build.sh).
# Mounts the kernel filesystems, loads WireGuard and IPIP, runs the script named in
# /kv/run.env (written by run.sh into the per-run layer), reports its exit code and powers off.
# Script output goes to the console (ttyS0) and, clean of kernel chatter, to ttyS1 which
# run.sh reads back; the last ttyS1 line is "KV-EXIT <code>".
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb KV_VM=1   # KV_VM: scripts may refuse to run elsewhere

# run.sh --systemd: systemd becomes PID 1 and runs the script as the unit kv-test.service,
# which reports and powers off as below.
if grep -qx 'KV_SYSTEMD=1' /kv/run.env 2>/dev/null && [ -x /lib/systemd/systemd ]; then
  cat >/kv/systemd-test.sh <<'SCRIPT'
#!/bin/bash
. /kv/run.env
export HOME=/root LANG=C.UTF-8 TERM=dumb KV_VM=1 PYTHONPATH=$KV_PYTHONPATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
out=/dev/ttyS1
stty -F "$out" raw -echo 2>/dev/null
cd /opt/kilo/ansible_collections/kilo/mesh
echo "KV-BEGIN" >"$out"
python3 "$KV_SCRIPT" "${KV_ARGS[@]}" 2>&1 </dev/null | tee "$out" >/dev/ttyS0
rc=${PIPESTATUS[0]}
echo "kv-init: exit $rc" >/dev/ttyS0
echo "KV-EXIT $rc" >"$out"
sync
echo o >/proc/sysrq-trigger
SCRIPT
  chmod 0755 /kv/systemd-test.sh
  cat >/etc/systemd/system/kv-test.service <<'UNIT'
[Unit]
Description=kilo.mesh VM test script
[Service]
Type=oneshot
ExecStart=/kv/systemd-test.sh
UNIT
  cat >/etc/systemd/system/kv.target <<'UNIT'
[Unit]
Description=kilo.mesh VM test
Requires=kv-test.service
After=kv-test.service
UNIT
  echo kv >/etc/hostname
  exec /lib/systemd/systemd --unit=kv.target --log-level=warning
fi

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
