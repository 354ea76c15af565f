#!/usr/bin/env bash
# ctest entry of the Python package's tests: pytest (from scripts/python-env.sh's venv, the one
# that built the extension) on tests/python/, with the package built into PACKAGE_DIR
# (build/python) first on the path and DLLM_BINARY to compare with.
#   run_pytest.sh DLLM_BINARY PACKAGE_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="$("$root/scripts/python-env.sh")"
cd "$root"
DLLM_BINARY="$1" PYTHONPATH="$2${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$python" -m pytest -q -p no:cacheprovider tests/python
