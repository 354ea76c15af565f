#!/usr/bin/env bash
# ctest entry of the lm-eval test: makes the Python env with lm-eval (scripts/python-env.sh --eval,
# pip from PyPI on first use: `lm-eval[api]`, no torch), then runs tests/eval/lm_eval_test.py
# against the given binary from the repository root.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="$("$root/scripts/python-env.sh" --eval)"
cd "$root"
exec "$python" tests/eval/lm_eval_test.py "$1"
