#!/usr/bin/env bash
# A real Kubernetes control plane for tests/kube, built once into the ignored .cache/kube/bin:
#   kube-apiserver  built from Debian's source package `kubernetes` (v1.20.2, every Go
#                   dependency vendored), offline, with Debian's golang-go
#   etcd            from Debian's etcd-server, unpacked (not installed)
#   kubectl         from Debian's kubernetes-client, unpacked (not installed)
# Run as root on Debian 12. /etc/apt is not touched: the deb-src entries live in a private apt
# configuration under the scratch directory, which is removed after a successful build.
# Cost on 2 cores: about 4-5 min, 1.3 GB memory, 2 GB scratch disk; then a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/.cache/kube
BIN=$CACHE/bin
WORK=$CACHE/build
say() { echo "kube: $*"; }

# One build at a time: two set-ups sharing .cache (worktrees of one checkout) would unpack and
# build over each other; the second waits and then finds the binaries ready.
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

runs() { "$BIN/$1" "${@:2}" >/dev/null 2>&1; }
have_all() {
  runs kube-apiserver --version && runs etcd --version && runs kubectl version --client
}
if have_all; then
  say "kube-apiserver, etcd and kubectl are ready in .cache/kube/bin"
  exit 0
fi
start=$SECONDS
mkdir -p "$BIN" "$WORK"

export DEBIAN_FRONTEND=noninteractive
apt_updated=
apt_update() {
  if [ -z "$apt_updated" ]; then
    apt-get update -qq
    apt_updated=1
  fi
}

# Build tools. golang-go is Debian 12's Go 1.19; reflect2 1.0.2 replaces the vendored 1.0.1,
# which is unsafe with Go >= 1.18.
NEED=(golang-go golang-github-modern-go-reflect2-dev dpkg-dev make rsync ca-certificates)
missing=()
for p in "${NEED[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  apt_update
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 \
    || { cat "$WORK/apt.log" >&2; exit 1; }
fi

# etcd and kubectl: the Debian packages' binaries, unpacked into the cache.
unpack_binary() { # package binary
  local dir=$WORK/deb-$1
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && { apt-get download -qq "$1" >/dev/null 2>&1 || { apt_update && apt-get download -qq "$1"; }; })
  dpkg -x "$dir"/"$1"_*.deb "$dir/root"
  install -m 0755 "$dir/root/usr/bin/$2" "$BIN/$2"
  say "$2 from Debian's $1 ($(basename "$dir"/"$1"_*.deb))"
}
runs etcd --version || unpack_binary etcd-server etcd
runs kubectl version --client || unpack_binary kubernetes-client kubectl

if ! runs kube-apiserver --version; then
  # A private apt configuration with deb-src twins of the system's Debian entries.
  apt_dir=$WORK/apt
  rm -rf "$apt_dir"
  mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n -E 's/^[[:space:]]*deb([[:space:]])/deb-src\1/p' "$f" | grep -E '/debian(-security)?/? ' \
      >>"$apt_dir/sources.list.d/src.list" || true
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822 stanzas: keep those of a Debian archive, typed deb-src.
    awk 'BEGIN { RS = ""; ORS = "\n\n" }
         /URIs:[^\n]*\/debian(-security)?\/?([ \n]|$)/ && /Types:[^\n]*deb/ {
           sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f" >>"$apt_dir/sources.list.d/src.sources"
  done
  [ -s "$apt_dir/sources.list.d/src.list" ] || rm -f "$apt_dir/sources.list.d/src.list"
  [ -s "$apt_dir/sources.list.d/src.sources" ] || rm -f "$apt_dir/sources.list.d/src.sources"
  if ! ls "$apt_dir/sources.list.d/"* >/dev/null 2>&1; then
    . /etc/os-release
    printf 'deb-src http://deb.debian.org/debian %s main\n' "$VERSION_CODENAME" \
      >"$apt_dir/sources.list.d/src.list"
    printf 'deb-src http://deb.debian.org/debian-security %s-security main\n' "$VERSION_CODENAME" \
      >>"$apt_dir/sources.list.d/src.list"
  fi
  APT_OPTS=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Sandbox::User=root"  # files land in the scratch tree, which _apt cannot write
  )
  say "fetching Debian's kubernetes source package (about 35 MB)"
  apt-get "${APT_OPTS[@]}" update -qq
  src=$WORK/src
  rm -rf "$src" && mkdir -p "$src"
  (cd "$src" && apt-get "${APT_OPTS[@]}" source --download-only -qq kubernetes >/dev/null)
  dsc=$(ls "$src"/kubernetes_*.dsc)
  say "unpacking $(basename "$dsc")"
  (cd "$src" && dpkg-source --no-check -x "$dsc" tree >/dev/null)
  tree=$src/tree

  # Debian's reflect2 sources (1.0.2, same API) in place of the vendored ones.
  r2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -d "$r2" ] || { echo "kube: $r2 is missing" >&2; exit 1; }
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -rL "$r2" "$tree/vendor/github.com/modern-go/reflect2"

  # The version the binary reports (there is no git tree).
  cat >"$WORK/version.env" <<'EOF'
KUBE_GIT_COMMIT=''
KUBE_GIT_TREE_STATE='archive'
KUBE_GIT_VERSION='v1.20.2'
KUBE_GIT_MAJOR='1'
KUBE_GIT_MINOR='20'
EOF
  say "building kube-apiserver (make WHAT=cmd/kube-apiserver, offline; about 4 min on 2 cores)"
  build_start=$SECONDS
  # The tree's Makefile builds in GOPATH mode and generates the OpenAPI definitions.
  if ! (cd "$tree" && env GOPROXY=off GOFLAGS= CGO_ENABLED=0 GO111MODULE=off \
          GOCACHE="$WORK/gocache" GOPATH="$WORK/gopath" GOTOOLCHAIN=local \
          KUBE_GIT_VERSION_FILE="$WORK/version.env" \
          make WHAT=cmd/kube-apiserver >"$WORK/make.log" 2>&1); then
    tail -n 40 "$WORK/make.log" >&2
    echo "kube: the build failed; the log is $WORK/make.log" >&2
    exit 1
  fi
  built=$(ls "$tree"/_output/local/bin/*/*/kube-apiserver "$tree"/_output/bin/kube-apiserver 2>/dev/null | head -n 1)
  [ -n "$built" ] || { echo "kube: no kube-apiserver in $tree/_output" >&2; exit 1; }
  install -m 0755 "$built" "$BIN/kube-apiserver"
  say "kube-apiserver built in $((SECONDS - build_start)) s"
fi

have_all || { echo "kube: a binary in $BIN does not run" >&2; exit 1; }
rm -rf "$WORK"
say "ready in .cache/kube/bin ($("$BIN/kube-apiserver" --version), etcd $("$BIN/etcd" --version | sed -n 's/^etcd Version: //p'); $((SECONDS - start)) s)"
