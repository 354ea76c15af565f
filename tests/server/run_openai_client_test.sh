#!/usr/bin/env bash
# ctest entry of the `openai` client test: makes the Python env (scripts/python-env.sh, pip from
# PyPI on first use), then runs tests/server/openai_client_test.py against the given binary.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="$("$root/scripts/python-env.sh")"
exec "$python" "$root/tests/server/openai_client_test.py" "$1"
