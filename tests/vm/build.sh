#!/usr/bin/env bash
# Build (or reuse) the kernel-test VM: Debian bookworm's own kernel plus a minbase bookworm
# rootfs packed as an initramfs. This machine's kernel has no WireGuard and no IPIP, so the
# host backends are exercised on Debian's kernel under qemu (TCG).
#
# Outputs (cached under .build/vm, rebuilt only when an input changes):
#   vmlinuz          Debian's kernel image
#   base.cpio.zst    rootfs + modules + /init; run.sh appends a small per-run layer to it
#   rootfs/          the unpacked rootfs (kept so init or module changes only repack)
#
# Env: KV_VM_DIR (cache dir), KV_MIRROR (Debian mirror URL; default: read from apt sources),
#      KV_PYROUTE2_SRC (pure-python pyroute2 package dir; default: the project's .venv),
#      KV_SYSTEMD=1 (a second image, cached apart in .build/vm-systemd: systemd as PID 1 and the
#      agent's libraries, for the agent's unit test; run.sh --systemd).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
systemd=${KV_SYSTEMD:-0}
if [ "$systemd" = 1 ]; then vm=${KV_VM_DIR:-$repo/.build/vm-systemd}; else vm=${KV_VM_DIR:-$repo/.build/vm}; fi
suite=bookworm
# python3-pyroute2 is Debian's 0.7.2 (what real hosts run); 0.9.7 sits beside it in
# /opt/kv-pyroute2 and is picked by PYTHONPATH (run.sh --pyroute2). python3-cffi-backend is
# listed because debootstrap does not resolve the virtual cffi API packages cryptography needs.
packages=python3,python3-cryptography,python3-cffi-backend,python3-pyroute2,iproute2,wireguard-tools,iputils-ping,kmod,nftables,iptables
# the agent's image: systemd as PID 1, the agent's libraries (python3-kubernetes, prometheus client);
# for the reboot test (run.sh --disk, --net): mkfs.ext4 for the persistent disk, ifupdown to
# bring the NIC up at boot as a Debian server does, wireguard-go for the userspace backend
[ "$systemd" = 1 ] && packages=$packages,systemd-sysv,python3-kubernetes,python3-prometheus-client,e2fsprogs,ifupdown,wireguard-go
# Module roots; modules.dep adds their dependencies (crypto libs, udp_tunnel, ...). All crypto
# algorithms are roots because some are only soft dependencies (libcrc32c needs crc32c for nf_tables).
module_roots='kernel/net/core kernel/net/ipv4 kernel/net/ipv6 kernel/net/netfilter
  kernel/net/bridge kernel/net/sched kernel/net/8021q kernel/net/802 kernel/net/llc
  kernel/net/packet kernel/net/unix kernel/net/key kernel/net/xfrm kernel/net/9p
  kernel/drivers/net/wireguard kernel/drivers/net/ipvlan kernel/drivers/net/vxlan
  kernel/drivers/net/bonding kernel/fs/9p kernel/crypto kernel/arch/x86/crypto
  kernel/drivers/virtio kernel/fs/ext4 kernel/fs/jbd2'
module_top_dir=kernel/drivers/net   # its top-level *.ko: veth, dummy, tun, vrf, macvlan, virtio_net, ...
module_files=kernel/drivers/block/virtio_blk   # single modules (any .ko suffix): the reboot test's disk

log() { printf 'kv-build: %s\n' "$*" >&2; }

find_pyroute2() {
  if [ -n "${KV_PYROUTE2_SRC:-}" ]; then echo "$KV_PYROUTE2_SRC"; return; fi
  local d
  for d in "$repo"/.venv/lib/python3*/site-packages/pyroute2; do
    [ -f "$d/__init__.py" ] && { echo "$d"; return; }
  done
  log "no pyroute2 package in $repo/.venv (set KV_PYROUTE2_SRC)"; exit 1
}

# The Debian mirror this machine's apt uses, for the bookworm suite's main component.
find_mirror() {
  if [ -n "${KV_MIRROR:-}" ]; then echo "$KV_MIRROR"; return; fi
  /usr/bin/python3 - "$suite" <<'PY'
import glob, sys
suite = sys.argv[1]
found = []
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = line.split("#", 1)[0].split()
        if words[:1] != ["deb"]:
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # [options]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 3 and words[1] == suite and "main" in words[2:]:
            found.append(words[0])
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if ":" in line and not line.startswith(("#", " ")):
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", []) and suite in fields.get("suites", []) \
                and "main" in fields.get("components", []):
            found.extend(fields.get("uris", []))
if not found:
    sys.exit("kv-build: no apt source for suite %s/main in /etc/apt (set KV_MIRROR)" % suite)
print(found[0])
PY
}

build_rootfs() {
  local mirror tmp
  mirror=$(find_mirror)
  log "debootstrap $suite (minbase) from $mirror"
  tmp="$vm/rootfs.new"
  rm -rf "$tmp"
  debootstrap --variant=minbase --include="$packages" "$suite" "$tmp" "$mirror" \
    >"$vm/debootstrap.log" 2>&1 || { tail -20 "$vm/debootstrap.log" >&2; log "debootstrap failed (log: $vm/debootstrap.log)"; exit 1; }
  # Trim what a test VM never reads; keeps the initramfs small and fast to unpack under TCG.
  rm -rf "$tmp"/usr/share/{doc,man,info,locale,i18n,lintian,linda,bash-completion,zoneinfo} \
         "$tmp"/var/cache/apt/* "$tmp"/var/lib/apt/lists/* "$tmp"/var/log/* \
         "$tmp"/usr/lib/x86_64-linux-gnu/gconv
  rm -rf "$vm/rootfs"
  mv "$tmp" "$vm/rootfs"
  echo "$packages" >"$vm/rootfs.stamp"
}

install_kernel() {
  local pkg dl x kver moddir m
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$pkg" ]; then
    log "apt lists lack linux-image-amd64; running apt-get update"
    apt-get update -qq >&2
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [ -n "$pkg" ] || { log "cannot resolve linux-image-amd64"; exit 1; }
  log "kernel package $pkg"
  dl=$(mktemp -d "$vm/kernel.XXXXXX")
  (cd "$dl" && apt-get download -q "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
  ls "$dl"/*.deb >/dev/null 2>&1 || { log "download of $pkg failed"; rm -rf "$dl"; exit 1; }
  x="$dl/x"
  dpkg-deb -x "$dl"/*.deb "$x"
  kver=$(ls "$x/lib/modules")
  depmod -b "$x" "$kver"
  moddir="$x/lib/modules/$kver"
  # Roots, then the closure of their dependencies from modules.dep.
  (
    cd "$moddir"
    for m in $module_roots; do [ -d "$m" ] && find "$m" -name '*.ko*'; done
    find "$module_top_dir" -maxdepth 1 -name '*.ko*'
    for m in $module_files; do find "$(dirname "$m")" -maxdepth 1 -name "$(basename "$m").ko*"; done
  ) | sort -u >"$dl/roots"
  awk -v roots="$dl/roots" '
    BEGIN { while ((getline l < roots) > 0) want[l] = 1 }
    { sub(":", "", $1); for (i = 1; i <= NF; i++) dep[$1] = dep[$1] " " $i }
    END {
      for (m in want) todo[m] = 1
      while (length(todo) > 0) {
        for (m in todo) { delete todo[m]; if (m in done) continue; done[m] = 1
          n = split(dep[m], d, " "); for (i = 1; i <= n; i++) if (!(d[i] in done)) todo[d[i]] = 1 }
      }
      for (m in done) print m
    }' "$moddir/modules.dep" | sort >"$dl/closure"
  rm -rf "$vm/rootfs/lib/modules" "$vm/rootfs/usr/lib/modules"
  mkdir -p "$vm/rootfs/lib/modules/$kver"
  (cd "$moddir" && cp --parents $(cat "$dl/closure") modules.builtin modules.builtin.modinfo modules.order \
     "$vm/rootfs/lib/modules/$kver/")
  depmod -b "$vm/rootfs" "$kver"
  cp "$x/boot/vmlinuz-$kver" "$vm/vmlinuz"
  log "kernel $kver: $(wc -l <"$dl/closure") modules"
  rm -rf "$dl"
  echo "$pkg" $module_roots $module_top_dir $module_files >"$vm/kernel.stamp"
}

pack_base() {
  local r="$vm/rootfs" py
  py=$(find_pyroute2)
  rm -rf "$r/opt/kv-pyroute2"
  mkdir -p "$r/opt/kv-pyroute2"
  cp -a "$py" "$r/opt/kv-pyroute2/"
  # Its metadata too, so importlib.metadata reports 0.9.7 rather than Debian's 0.7.2.
  cp -a "$(dirname "$py")"/pyroute2-*.dist-info "$r/opt/kv-pyroute2/" 2>/dev/null || true
  find "$r/opt/kv-pyroute2" -name __pycache__ -prune -exec rm -rf {} +
  # Precompile with the VM's own python (3.11): imports under TCG are slow enough.
  chroot "$r" /usr/bin/python3 -m compileall -q /opt/kv-pyroute2 >/dev/null
  install -m 0755 "$here/init.sh" "$r/init"
  mkdir -p "$r/opt/kilo" "$r/kv"
  log "packing base initramfs"
  (cd "$r" && find . -xdev -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) \
    | zstd -q -T0 -10 >"$vm/base.cpio.zst.new"
  mv "$vm/base.cpio.zst.new" "$vm/base.cpio.zst"
}

mkdir -p "$vm"
exec 9>"$vm/.lock"
flock 9    # concurrent run.sh calls share one build

for tool in debootstrap qemu-system-x86_64 cpio zstd dpkg-deb depmod apt-get; do
  command -v "$tool" >/dev/null || { log "missing tool: $tool (apt-get install debootstrap qemu-system-x86 cpio zstd kmod)"; exit 1; }
done

start=$SECONDS
if [ "${KV_REBUILD:-0}" = 1 ]; then rm -f "$vm/rootfs.stamp" "$vm/kernel.stamp" "$vm/base.stamp"; fi
if [ ! -x "$vm/rootfs/usr/bin/python3" ] || [ "$(cat "$vm/rootfs.stamp" 2>/dev/null)" != "$packages" ]; then
  build_rootfs
  rm -f "$vm/kernel.stamp"
fi
if [ ! -f "$vm/vmlinuz" ] || [ "$(cut -d' ' -f2- "$vm/kernel.stamp" 2>/dev/null)" != "$(echo $module_roots $module_top_dir $module_files)" ]; then
  install_kernel
  rm -f "$vm/base.stamp"
fi
base_key=$( (cat "$here/init.sh" "$here/build.sh" "$vm/rootfs.stamp" "$vm/kernel.stamp";
            cd "$(find_pyroute2)" && find . -name '*.py' | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-16)
if [ ! -f "$vm/base.cpio.zst" ] || [ "$(cat "$vm/base.stamp" 2>/dev/null)" != "$base_key" ]; then
  pack_base
  echo "$base_key" >"$vm/base.stamp"
  log "built in $((SECONDS - start)) s; cache $(du -sh "$vm" | cut -f1) in $vm"
fi
