#!/usr/bin/env bash
# The cluster soak (`make soak-cluster`): builds the five services and the CLI with a sanitizer in
# a tree of their own, then runs tools/sanitizers/cluster_soak.py against them for MINUTES (mixed
# traffic, random SIGKILLs, acknowledged states checked at the end). The report goes to
# BUILD_DIR/cluster-soak.json. Any sanitizer report fails the run.
#
#   tools/sanitizers/cluster_soak.sh thread|address BUILD_DIR [MINUTES] [JOBS]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
sanitizer="$1"
dir="$2"
minutes="${3:-30}"
jobs="${4:-$(nproc)}"
case "$sanitizer" in
  thread)
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$repo/tools/sanitizers/tsan.supp" ;;
  address)
    export ASAN_OPTIONS="detect_leaks=1 halt_on_error=1"
    export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" ;;
  *) echo "cluster soak: the sanitizer is thread or address, not '$sanitizer'" >&2; exit 2 ;;
esac
# UCX's own malloc and mmap hooks fight the sanitizers' interceptors.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
echo "cluster soak: building the services with -fsanitize=$sanitizer in $dir ($jobs jobs)"
CC=clang CXX=clang++ cmake -S "$repo" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGLIMPSE_SANITIZE="$sanitizer" -DCMAKE_CUDA_COMPILER= >/dev/null
cmake --build "$dir" -j"$jobs" --target glimpse glimpse-coordinator glimpse-cache-node \
  glimpse-decode-worker glimpse-prefill-worker glimpse-frontend
echo "cluster soak: $minutes minutes under $sanitizer (logs: $dir/cluster-soak/logs)"
rm -rf "$dir/cluster-soak"
/usr/bin/python3 "$repo/tools/sanitizers/cluster_soak.py" --bin-dir "$dir" --source "$repo" \
  --minutes "$minutes" --work "$dir/cluster-soak" --report "$dir/cluster-soak.json"
