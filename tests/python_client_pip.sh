#!/usr/bin/env bash
# `pip install ./clients/python` in a fresh venv (grpcio and protobuf from PyPI, the stubs built
# into the wheel), then the Python client's tests (clients/python/tests/test_client.py) against
# the installed package, from outside the checkout. Registered with ctest by
# tests/python_client.cmake; needs PyPI.
#
#   tests/python_client_pip.sh WORK_DIR GLIMPSE_BINARY [PYTHON]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$1"
glimpse="$(realpath "$2")"
python="${3:-python3}"
rm -rf "$work"
mkdir -p "$work"
"$python" -m venv "$work/venv"
# pip builds in the checkout: setuptools' build/ from an earlier install must not leak into this one.
rm -rf "$repo/clients/python/build"
"$work/venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q \
  "$repo/clients/python"
cd "$work"
GLIMPSE_CLIENT_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python" \
  "$repo/clients/python/tests/test_client.py" --glimpse "$glimpse" -v
