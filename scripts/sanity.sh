#!/usr/bin/env bash
# ansible-test sanity must run from a path ending in ansible_collections/NS/NAME, and it
# resolves symlinks; so sanity runs on a copy of the collection's files (what git tracks
# or would track), made fresh each time under .build/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# A copy per run (several checkouts' or engineers' runs at once must not clobber each other).
work=.build/sanity-$$
dest=$work/ansible_collections/kilo/mesh
rm -rf "$work"
trap 'rm -rf "$root/$work"' EXIT
mkdir -p "$dest"
# What ships: tracked (or trackable) files minus galaxy.yml's build_ignore.
.venv/bin/python - <<'PY' | rsync -a --from0 --files-from=- ./ "$dest/"
import os, subprocess, sys, yaml
ignore = yaml.safe_load(open("galaxy.yml")).get("build_ignore", [])
files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       check=True, capture_output=True).stdout.decode().split("\0")
keep = [f for f in files if f and os.path.exists(f)
        and not any(f == i or f.startswith(i.rstrip("/") + "/") for i in ignore)]
sys.stdout.write("".join(f + "\0" for f in keep))
PY
cd "$dest"
# ansible-test lists files with git; the copy needs a repository of its own.
git init -q .
# ansible-test's --venv bootstraps pip from a host this machine cannot reach, so the tests
# run --local in a virtualenv of their own (their pins clash with ansible-lint's).
venv=$root/.build/sanity-venv
if [ ! -x "$venv/bin/ansible-test" ]; then
  "$root/.venv/bin/python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$(grep '^ansible-core==' "$root/requirements.txt")" 2>/dev/null
fi
# Each sanity test gets a fresh virtualenv that ansible-test fills with pip through a
# "get-pip" script it downloads from a host outside the package registries. Stand in for
# it with the same job done from PyPI: ensurepip, then pip installs what was asked.
pip_version=$("$venv/bin/python" -c 'from ansible_test._internal.python_requirements import get_venv_packages as g
from types import SimpleNamespace as N; print(g(N(version="3.12"))["pip"])')
mkdir -p ~/.ansible/test/cache
cat > ~/.ansible/test/cache/get_pip_${pip_version//./_}.py <<'PY'
import subprocess, sys
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + args)
PY
# The collection's docs as the Ansible docsite builds them: the extra docs (docs/docsite) and every
# plugin's and role's documentation (markup, references), on the same copy of what ships: found
# first on the collections path, before the checkout's link, with the dependencies (galaxy.yml)
# make setup put in .collections/.
docs_rc=0
PATH="$root/.venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$root/.build/sanity:$root/.collections" \
  "$root/.venv/bin/antsibull-docs" lint-collection-docs --plugin-docs \
  --check-extra-docs-refs . || docs_rc=$?
[ "$docs_rc" -eq 0 ] && echo "sanity: antsibull-docs lint-collection-docs: ok" \
  || echo "sanity: antsibull-docs lint-collection-docs failed (exit $docs_rc)" >&2
"$venv/bin/ansible-test" sanity --local --requirements --python 3.12 --color no "$@"
exit "$docs_rc"
