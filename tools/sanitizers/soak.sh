#!/usr/bin/env bash
# The soak test (`make soak`): the concurrency-heavy suites -- the worker engine (continuous
# batching, preemption, observers), both workers' turns against an in-process cache node,
# the cache node service and the coordinator -- built with clang and a sanitizer in a tree of their
# own, each run REPEAT times in shuffled order. ThreadSanitizer reads the suppressions in
# tools/sanitizers/tsan.supp (Debian's uninstrumented libraries only); AddressSanitizer runs with
# UBSan and leak detection. Any report fails the run.
#
#   tools/sanitizers/soak.sh thread|address BUILD_DIR [REPEAT] [JOBS]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
sanitizer="$1"
dir="$2"
repeat="${3:-3}"
jobs="${4:-$(nproc)}"
tests=(core/worker/glimpse_worker_test coordinator/glimpse_coordinator_test
       decode-worker/glimpse_decode_worker_test prefill-worker/glimpse_prefill_worker_test
       cache-node/glimpse_cache_node_test)
case "$sanitizer" in
  thread)
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$repo/tools/sanitizers/tsan.supp" ;;
  address)
    export ASAN_OPTIONS="detect_leaks=1 halt_on_error=1"
    export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" ;;
  *) echo "soak: the sanitizer is thread or address, not '$sanitizer'" >&2; exit 2 ;;
esac
echo "soak: building ${#tests[@]} suites with -fsanitize=$sanitizer in $dir ($jobs jobs)"
CC=clang CXX=clang++ cmake -S "$repo" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGLIMPSE_SANITIZE="$sanitizer" -DCMAKE_CUDA_COMPILER= >/dev/null
cmake --build "$dir" -j"$jobs" --target "${tests[@]##*/}"
for t in "${tests[@]}"; do
  start=$(date +%s)
  log="$dir/soak-${t##*/}.log"
  if ! "$dir/$t" --gtest_repeat="$repeat" --gtest_shuffle --gtest_brief=1 >"$log" 2>&1; then
    tail -n 80 "$log"
    echo "soak: ${t##*/} FAILED under $sanitizer (log: $log)" >&2
    exit 1
  fi
  echo "soak: ${t##*/} x$repeat clean under $sanitizer ($(( $(date +%s) - start )) s)"
done
