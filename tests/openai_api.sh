#!/usr/bin/env bash
# The OpenAI API test (tests/openai_api_test.py) under PyPI's `openai` package, in a venv of its
# own under WORK_DIR (kept between runs; rebuilt when the pinned version changes). Registered with
# ctest by tests/openai_api.cmake; needs PyPI on the first run.
#
#   tests/openai_api.sh WORK_DIR GLIMPSE_BINARY [PYTHON]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$1"
glimpse="$(realpath "$2")"
python="${3:-python3}"
pin="openai==3.57.0"
venv="$work/venv"
if [ "$(cat "$work/pin" 2>/dev/null)" != "$pin" ]; then
  rm -rf "$work"
  mkdir -p "$work"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q "$pin"
  echo "$pin" > "$work/pin"
fi
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" "$repo/tests/openai_api_test.py" --glimpse "$glimpse" -v
