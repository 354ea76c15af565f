#!/usr/bin/env bash
# The Python environment of the Python package, the server tests and benchmarks: a venv under
# build/python-env with nanobind (to build the `dllm` extension in build/python), pytest and the
# `openai` client from PyPI (with --eval also EleutherAI's lm-eval, with --bench the aiperf load
# generator). Idempotent: a venv that already has the packages is reused. Prints the venv's python.
#   scripts/python-env.sh [--eval] [--bench]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DLLM_PYTHON_ENV:-build/python-env}"
packages=(openai nanobind pytest)
for arg in "$@"; do
  case "$arg" in
    --eval) packages+=("lm-eval[api]") ;;
    --bench) packages+=(aiperf) ;;
    *) echo "python-env.sh: unknown option $arg (accepted: --eval, --bench)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
missing=()
for p in "${packages[@]}"; do
  module="${p%%[*}"                # lm-eval[api] -> lm-eval
  module="${module//-/_}"          # lm-eval -> lm_eval
  "$venv/bin/python" -c "import $module" 2>/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # A lock: ctest may start several Python tests at once.
  exec 9>"$venv/.install.lock"
  flock 9
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$(cd "$venv" && pwd)/bin/python"
