#!/usr/bin/env bash
# The Python environment of the server tests and benchmarks: a venv under build/python-env with
# the `openai` client from PyPI (and, with --bench, the aiperf load generator). Idempotent: a
# venv that already has the packages is reused. Prints the venv's python.
#   scripts/python-env.sh [--bench]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DLLM_PYTHON_ENV:-build/python-env}"
packages=(openai)
[ "${1:-}" = "--bench" ] && packages+=(aiperf)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
missing=()
for p in "${packages[@]}"; do
  "$venv/bin/python" -c "import $p" 2>/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # A lock: ctest may start several Python tests at once.
  exec 9>"$venv/.install.lock"
  flock 9
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$(cd "$venv" && pwd)/bin/python"
