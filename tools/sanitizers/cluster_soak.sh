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
# UCX's own malloc and mmap hooks fight the sanitizers' interceptors.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
echo "cluster soak: building the services with -fsanitize=$sanitizer in $dir ($jobs jobs)"
source "$repo/tools/sanitizers/sanitizer_env.sh"
JOBS="$jobs" sanitizer_setup "$sanitizer" "$dir" glimpse glimpse-coordinator glimpse-cache-node \
  glimpse-decode-worker glimpse-prefill-worker glimpse-frontend
echo "cluster soak: $minutes minutes under $sanitizer (logs: $dir/cluster-soak/logs)"
rm -rf "$dir/cluster-soak"
/usr/bin/python3 "$repo/tools/sanitizers/cluster_soak.py" --bin-dir "$dir" --source "$repo" \
  --minutes "$minutes" --work "$dir/cluster-soak" --report "$dir/cluster-soak.json"
