# Sourced by soak.sh and cluster_soak.sh: `sanitizer_setup SANITIZER DIR TARGET...` sets the runtime
# options of SANITIZER (thread: the suppressions in tsan.supp; address: UBSan and leak detection
# too, with lsan.supp; any report halts) and builds TARGETs with it in the clang tree DIR.
sanitizer_setup() {
  local sanitizer="$1" dir="$2" repo
  shift 2
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  case "$sanitizer" in
    thread)
      export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$repo/tools/sanitizers/tsan.supp" ;;
    address)
      export ASAN_OPTIONS="detect_leaks=1 halt_on_error=1"
      export LSAN_OPTIONS="suppressions=$repo/tools/sanitizers/lsan.supp"
      export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" ;;
    *) echo "the sanitizer is thread or address, not '$sanitizer'" >&2; return 2 ;;
  esac
  CC=clang CXX=clang++ cmake -S "$repo" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DGLIMPSE_SANITIZE="$sanitizer" -DCMAKE_CUDA_COMPILER= >/dev/null
  cmake --build "$dir" -j"${JOBS:-$(nproc)}" --target "$@"
}
