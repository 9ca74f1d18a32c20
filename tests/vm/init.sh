#!/bin/bash
# PID 1 of the kernel-test VM (installed as /init in the initramfs by build.sh).
# Mounts the kernel filesystems, loads WireGuard and IPIP, runs the script named in
# /kv/run.env (written by run.sh into the per-run layer), reports its exit code and powers off.
# Script output goes to the console (ttyS0) and, clean of kernel chatter, to ttyS1 which
# run.sh reads back; the last ttyS1 line is "KV-EXIT <code>".
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb KV_VM=1   # KV_VM: scripts may refuse to run elsewhere

# run.sh --disk (with --systemd): a disk that outlives reboots, for the reboot test. Formatted
# on the first boot; the directories below live on it (seeded from the image on that boot) and
# are bind-mounted over the image's before systemd starts, so what a converge writes there is
# back after a reboot, as on a real host; the rest of the rootfs is the fresh initramfs of every
# boot. /kv/disk/boot counts the boots (1 on the first), for the script (KV_BOOT).
KV_PERSIST='/etc/systemd/system /etc/network /etc/sysctl.d /etc/cni /var/lib/kilo /usr/lib/kilo-mesh'
persist() {
  local m d i
  mount -t proc proc /proc
  mount -t sysfs sysfs /sys
  mount -t devtmpfs devtmpfs /dev
  # no udev in the image: the drivers of the disk and the NIC are loaded here
  for m in virtio_pci virtio_blk virtio_net ext4; do
    modprobe "$m" || echo "kv-init: modprobe $m failed" >&2
  done
  for i in $(seq 100); do [ -b /dev/vda ] && break; sleep 0.1; done
  # ext4's magic (0xEF53, little-endian) at byte 1080: anything else is a new disk
  if [ "$(dd if=/dev/vda bs=1 skip=1080 count=2 2>/dev/null | od -An -tx1 | tr -d ' \n')" != 53ef ]; then
    echo "kv-init: formatting the persistent disk" >&2
    mkfs.ext4 -q -F -L kv-disk /dev/vda
  fi
  mkdir -p /kv/disk
  mount -t ext4 /dev/vda /kv/disk || { echo "kv-init: cannot mount the persistent disk" >&2; return 1; }
  if [ ! -f /kv/disk/seeded ]; then
    for d in $KV_PERSIST; do
      mkdir -p "/kv/disk/root$d"
      if [ -d "$d" ]; then cp -a "$d/." "/kv/disk/root$d/"; fi
    done
    touch /kv/disk/seeded
  fi
  for d in $KV_PERSIST; do
    mkdir -p "$d"
    mount --bind "/kv/disk/root$d" "$d"
  done
  echo $(( $(cat /kv/disk/boot 2>/dev/null || echo 0) + 1 )) >/kv/disk/boot
  sync   # the count must survive a hard reset of this boot
}

# run.sh --systemd: systemd becomes PID 1 and runs the script as the unit kv-test.service,
# which reports and powers off as below. With --disk the script may end its boot instead:
# exit code 100 reboots (systemctl reboot), 101 resets at once (sysrq b: no sync, no unmount);
# the script runs again on the next boot, KV_BOOT telling which.
if grep -qx 'KV_SYSTEMD=1' /kv/run.env 2>/dev/null && [ -x /lib/systemd/systemd ]; then
  disk=0
  if grep -qx 'KV_DISK=1' /kv/run.env; then
    disk=1
    persist || disk=0
  fi
  cat >/kv/systemd-test.sh <<'SCRIPT'
#!/bin/bash
. /kv/run.env
export HOME=/root LANG=C.UTF-8 TERM=dumb KV_VM=1 PYTHONPATH=$KV_PYTHONPATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
KV_BOOT=$(cat /kv/disk/boot 2>/dev/null || echo 1)
export KV_BOOT
out=/dev/ttyS1
stty -F "$out" raw -echo 2>/dev/null
cd /opt/kilo/ansible_collections/kilo/mesh
echo "KV-BEGIN $KV_BOOT" >"$out"
python3 "$KV_SCRIPT" "${KV_ARGS[@]}" 2>&1 </dev/null | tee "$out" >/dev/ttyS0
rc=${PIPESTATUS[0]}
echo "kv-init: exit $rc" >/dev/ttyS0
if [ "${KV_DISK:-0}" = 1 ] && [ -f /kv/disk/boot ]; then
  case $rc in
    100) echo "KV-REBOOT $KV_BOOT" >"$out"; systemctl --no-block reboot; exit 0 ;;
    101) echo "KV-RESET $KV_BOOT" >"$out"; echo b >/proc/sysrq-trigger; sleep 30 ;;
  esac
fi
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
  if [ "$disk" = 1 ]; then
    # a whole boot, as a host's: the enabled units (networking, kilo-mesh.service) start too;
    # no login prompt on the console
    echo 'Wants=multi-user.target' >>/etc/systemd/system/kv.target
    ln -sf /dev/null /etc/systemd/system/serial-getty@ttyS0.service
    ln -sf /dev/null /etc/systemd/system/getty@tty1.service
  fi
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
