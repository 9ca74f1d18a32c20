#!/usr/bin/env bash
# `make lint`: the formatter (check only), the Python linter (ruff.toml), then ansible-lint.
# Every step runs even when an earlier one fails; the exit status says whether any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
failed=0
step() { "$@" || { echo "lint: failed: $*" >&2; failed=1; }; }
step .venv/bin/ruff format --check --quiet .   # to fix: .venv/bin/ruff format .
step .venv/bin/ruff check --quiet .
step .venv/bin/ansible-lint --profile production -q
exit $failed
