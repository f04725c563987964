#!/usr/bin/env bash
# Builds llama.cpp's own server (llama-server), and llama-quantize beside it, from the llama.cpp
# sources vendored in the pinned llama-cpp-python sdist the oracle venv uses
# (tools/oracle/setup_venv.sh), so the serving benchmark's anchor is the same llama.cpp as `make
# bench`'s (llama-quantize makes the K-quant files of tools/oracle/check_kquants.py). Prints the
# server's path on stdout (llama-quantize is in the same directory); progress on stderr.
#
#   tools/oracle/build_llama_server.sh
#
# The sdist comes from PyPI (pip download, the only registry reachable here); the build is
# -march=native like our runtime, without the web UI (its assets are fetched from Hugging Face,
# which the benchmark does not need), without curl and OpenSSL. About 10 minutes on 2 cores, once:
# a binary already built from the same version is reused. Where:
# ${GLIMPSE_CACHE_DIR:-~/.cache/glimpse}/llama-server-<version>/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(sed -n 's/^LLAMA_CPP_PYTHON_VERSION=//p' "$here/setup_venv.sh")"
cache_dir="${GLIMPSE_CACHE_DIR:-$HOME/.cache/glimpse}"
out="$cache_dir/llama-server-$version"
binary="$out/build/bin/llama-server"
log() { echo "build_llama_server: $*" >&2; }

if [[ -x "$binary" && -x "$(dirname "$binary")/llama-quantize" ]]; then
  echo "$binary"
  exit 0
fi
command -v cmake >/dev/null || { log "cmake is missing (apt-get install cmake)"; exit 1; }
venv="$("$here/setup_venv.sh")"  # its pip fetches the sdist
mkdir -p "$out"
sdist="$out/llama_cpp_python-$version.tar.gz"
if [[ ! -f "$sdist" ]]; then
  log "downloading the llama-cpp-python $version sdist"
  "$venv/bin/python" -m pip download --disable-pip-version-check --progress-bar off --no-deps \
    --no-binary :all: -d "$out" "llama-cpp-python==$version" >&2
fi
src="$out/llama_cpp_python-$version/vendor/llama.cpp"
[[ -d "$src" ]] || tar -xzf "$sdist" -C "$out"
log "building llama-server (about 10 minutes on 2 cores)"
cmake -S "$src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF >&2
cmake --build "$out/build" -j "$(nproc)" --target llama-server llama-quantize >&2
[[ -x "$binary" ]] || { log "the build did not produce $binary"; exit 1; }
echo "$binary"
