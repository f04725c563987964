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
echo "soak: building ${#tests[@]} suites with -fsanitize=$sanitizer in $dir ($jobs jobs)"
source "$repo/tools/sanitizers/sanitizer_env.sh"
JOBS="$jobs" sanitizer_setup "$sanitizer" "$dir" "${tests[@]##*/}"
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
