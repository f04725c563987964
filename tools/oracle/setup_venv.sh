#!/usr/bin/env bash
# Creates (or completes) the oracle venv: reference engines we did not write, used to make golden
# fixtures (tools/oracle/make_golden.py) and to benchmark against (bench/llama_cpp_bench.py).
#
#   tools/oracle/setup_venv.sh               llama-cpp-python, numpy, gguf (all `make bench` needs)
#   tools/oracle/setup_venv.sh --with-torch  also transformers, torch (CPU use), accelerate and
#                                            kvpress: for tools/oracle/make_golden.py and
#                                            tools/oracle/make_kvpress_fixtures.py
#
# Idempotent: a package set that is already installed at its pinned version is not touched, so a
# second run takes a second. Prints the venv's path on stdout; progress goes to stderr.
# Venv: ${GLIMPSE_ORACLE_VENV:-${GLIMPSE_CACHE_DIR:-~/.cache/glimpse}/venv-oracle}.
#
# llama-cpp-python is built from source (a C/C++ toolchain and cmake are needed; 5-10 minutes on
# 2 cores) with -march=native, like our runtime, so benchmarks compare like with like. Extra cmake
# flags can be passed through CMAKE_ARGS. PyPI's Linux torch wheel pulls CUDA libraries (~3 GB)
# as dependencies even though we only run it on the CPU; PyPI is the only registry reachable here.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
NUMPY_VERSION=2.4.6
GGUF_VERSION=0.19.0
TRANSFORMERS_VERSION=5.23.0
TORCH_VERSION=2.15.0
ACCELERATE_VERSION=1.15.0  # transformers needs it to load GGUF files
# kvpress declares transformers<5.3 (and datasets, peft, ... for its pipeline and other presses);
# it is installed with --no-deps so the pinned transformers stays, and make_kvpress_fixtures.py
# imports only the press modules it uses (torch + transformers suffice).
KVPRESS_VERSION=0.5.5

with_torch=0
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "setup_venv.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

cache_dir="${GLIMPSE_CACHE_DIR:-$HOME/.cache/glimpse}"
venv="${GLIMPSE_ORACLE_VENV:-$cache_dir/venv-oracle}"
py="$venv/bin/python"
log() { echo "setup_venv: $*" >&2; }

if [[ ! -x "$py" ]]; then
  log "creating $venv"
  mkdir -p "$(dirname "$venv")"
  if ! python3 -m venv "$venv" >&2; then
    log "python3 -m venv failed; install Debian's python3-venv (apt-get install python3-venv)"
    exit 1
  fi
fi

# installed NAME VERSION: true when the distribution NAME is installed at exactly VERSION.
installed() {
  "$py" - "$1" "$2" <<'EOF' 2>/dev/null
import sys
from importlib import metadata
try:
    sys.exit(0 if metadata.version(sys.argv[1]) == sys.argv[2] else 1)
except metadata.PackageNotFoundError:
    sys.exit(1)
EOF
}

pip_install() {
  log "pip install $*"
  "$py" -m pip install --disable-pip-version-check --progress-bar off "$@" >&2
}

base=()
installed numpy "$NUMPY_VERSION" || base+=("numpy==$NUMPY_VERSION")
installed gguf "$GGUF_VERSION" || base+=("gguf==$GGUF_VERSION")
if ((${#base[@]})); then pip_install "${base[@]}"; fi

if ! installed llama_cpp_python "$LLAMA_CPP_PYTHON_VERSION"; then
  if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null; then
    log "llama-cpp-python builds from source: install cmake and a C++ compiler (build-essential)"
    exit 1
  fi
  # Only the text model library: no multimodal (mtmd/llava) library, tests or examples.
  export CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF ${CMAKE_ARGS:-}"
  export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
  log "building llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION from source (several minutes)"
  pip_install "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
fi

if ((with_torch)); then
  extra=()
  installed torch "$TORCH_VERSION" || extra+=("torch==$TORCH_VERSION")
  installed transformers "$TRANSFORMERS_VERSION" || extra+=("transformers==$TRANSFORMERS_VERSION")
  installed accelerate "$ACCELERATE_VERSION" || extra+=("accelerate==$ACCELERATE_VERSION")
  if ((${#extra[@]})); then pip_install "${extra[@]}"; fi
  installed kvpress "$KVPRESS_VERSION" || pip_install --no-deps "kvpress==$KVPRESS_VERSION"
fi

"$py" -c "import llama_cpp, numpy, gguf" >&2 || { log "imports failed in $venv"; exit 1; }
if ((with_torch)); then
  "$py" -c "import torch, transformers, accelerate" >&2 || { log "torch/transformers import failed"; exit 1; }
fi
echo "$venv"
