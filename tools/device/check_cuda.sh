#!/usr/bin/env bash
# Verifies the CUDA backend on a machine with an NVIDIA GPU, in one command and under 8 minutes:
# builds the CUDA targets, runs every CUDA test (each kernel against its CPU reference), the tests
# again under compute-sanitizer where it runs, the GPU benchmark (bench/cuda_bench.cc) and PyTorch's
# attention beside it (bench/cuda_sdpa_peer.py), then prints one summary. Exit status 0 only when
# every test ran and passed.
#
#   tools/device/check_cuda.sh [--out DIR]        build here (needs `make deps`) and check
#   tools/device/check_cuda.sh --package DIR      build here, copy the binaries and the non-CUDA
#                                                 libraries they need to DIR, for a GPU host
#                                                 without the project's dependencies
#   GLIMPSE_CUDA_BIN=DIR tools/device/check_cuda.sh [--out DIR]   check with a --package folder
set -uo pipefail
cd "$(dirname "$0")/../.."

out=build-cuda/check
package=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --package) package="$2"; shift 2 ;;
    *) echo "usage: $0 [--out DIR] [--package DIR]" >&2; exit 2 ;;
  esac
done

# The CUDA test binaries and where the build puts them, the benchmark, and the CLI.
tests=(kernels/cuda/glimpse_kernels_cuda_test tests/glimpse_cuda_model_test)
bench=bench/glimpse_bench_cuda
cli=tools/cli/glimpse

build() {
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGLIMPSE_NATIVE=OFF >/dev/null &&
    cmake --build build-cuda -j "$(nproc)" --target "${tests[@]##*/}" "${bench##*/}" "${cli##*/}"
}

if [ -n "$package" ]; then
  build || exit 1
  mkdir -p "$package/lib"
  for t in "${tests[@]}" "$bench" "$cli"; do
    cp "build-cuda/$t" "$package/"
    # Every library outside the C runtime and the CUDA toolkit (which the GPU host has).
    ldd "build-cuda/$t" | awk '/=> \// {print $3}' |
      grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so|cuda|cublas' |
      while read -r lib; do cp -L "$lib" "$package/lib/"; done
  done
  echo "packaged into $package: $(ls "$package" "$package/lib" | tr '\n' ' ')"
  exit 0
fi

bins=()
if [ -n "${GLIMPSE_CUDA_BIN:-}" ]; then
  export LD_LIBRARY_PATH="$GLIMPSE_CUDA_BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for t in "${tests[@]}"; do bins+=("$GLIMPSE_CUDA_BIN/${t##*/}"); done
  bin_bench="$GLIMPSE_CUDA_BIN/${bench##*/}"
  bin_cli="$GLIMPSE_CUDA_BIN/${cli##*/}"
else
  build || exit 1
  for t in "${tests[@]}"; do bins+=("build-cuda/$t"); done
  bin_bench="build-cuda/$bench"
  bin_cli="build-cuda/$cli"
fi
export GLIMPSE_SOURCE_DIR="$PWD"  # the fixtures of this checkout
mkdir -p "$out"

# cuBLAS and the CUDA runtime from wherever this host keeps them (toolkit or PyTorch's wheels).
if ldd "${bins[@]}" | grep -q 'not found'; then
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib \
      $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null); do
    [ -d "$dir" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
  done
  export LD_LIBRARY_PATH
fi
if ldd "${bins[@]}" | grep 'not found'; then
  echo "libraries missing (above): install the CUDA toolkit's cuBLAS" >&2
  exit 1
fi

nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
status=0
summary=()

echo "== CUDA tests"
: >"$out/cuda_tests.log"
test_rc=0
for b in "${bins[@]}"; do
  "$b" 2>&1 | tee -a "$out/cuda_tests.log" |
    grep -E '^\[ *(  FAILED|  PASSED|  SKIPPED|==========) *\]|Failure|error|^\[ (logits|greedy|batch)'
  rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && test_rc=$rc
done
skipped=$(grep -c '^\[  SKIPPED \]' "$out/cuda_tests.log" || true)
passed=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$out/cuda_tests.log" | awk '{s += $NF} END {print s + 0}')
if [ "$test_rc" -ne 0 ] || [ "$skipped" -ne 0 ]; then
  status=1
  summary+=("tests: FAILED (exit $test_rc, $skipped skipped; $out/cuda_tests.log)")
else
  summary+=("tests: ${passed:-0} passed, none skipped")
fi

if command -v compute-sanitizer >/dev/null; then
  echo "== the same tests under compute-sanitizer (memcheck)"
  : >"$out/memcheck.log"
  mc=0
  for b in "${bins[@]}"; do
    timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$b" --gtest_brief=1 \
      >>"$out/memcheck.log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && mc=$rc
  done
  tail -n 5 "$out/memcheck.log"
  case $mc in
    0) summary+=("memcheck: clean") ;;
    124) summary+=("memcheck: a binary did not finish in 180 s (not counted)") ;;
    *) status=1; summary+=("memcheck: FAILED (exit $mc; $out/memcheck.log)") ;;
  esac
else
  summary+=("memcheck: compute-sanitizer not installed")
fi

echo "== glimpse generate --device cuda against --device cpu and transformers (tiny checkpoints)"
cli_ok=0
for name in llama3 qwen2 qwen3; do
  dir=tests/fixtures/tiny/$name
  # The continuation up to its first token the tokenizer cannot decode (qwen2's padded rows).
  read -r prompt want < <(python3 -c "import json, itertools; g = json.load(open('$dir/golden.json'))
want = itertools.takewhile(lambda t: t < g['tokenizer_vocab_size'], g['greedy'])
print(','.join(map(str, g['token_ids'])), ','.join(map(str, want)))")
  n=$(echo "$want" | tr ',' '\n' | wc -l)
  line="  $name:"
  for device in cpu cuda; do
    got=$("$bin_cli" generate --model "$dir" --device "$device" --prompt-tokens "$prompt" \
      --max-tokens "$n" --json 2>"$out/cli_$device.err" |
      python3 -c "import json, sys; print(','.join(map(str, json.loads(sys.stdin.read())['tokens'])))" 2>/dev/null)
    if [ "$got" = "$want" ]; then line+=" $device = transformers"; else line+=" $device DIFFERS ($got)"; cli_ok=1; fi
  done
  echo "$line"
done
if [ "$cli_ok" -eq 0 ]; then
  summary+=("glimpse generate: cpu and cuda give transformers' greedy tokens on 3 tiny models")
else
  status=1; summary+=("glimpse generate: FAILED (above; $out/cli_*.err)")
fi

echo "== benchmark"
"$bin_bench" --json "$out/cuda_bench.json" 2>&1 | tee "$out/cuda_bench.log"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" -ne 0 ] && { status=1; summary+=("benchmark: FAILED (exit $bench_rc)"); }

echo "== PyTorch scaled_dot_product_attention, same shapes"
peer_args=()
[ -f "$out/cuda_bench.json" ] && peer_args=(--ours "$out/cuda_bench.json")
python3 bench/cuda_sdpa_peer.py "${peer_args[@]}" --json "$out/sdpa_peer.json" 2>&1 |
  tee "$out/sdpa_peer.log"

echo
echo "== summary"
for line in "${summary[@]}"; do echo "  $line"; done
if [ -f "$out/cuda_bench.json" ]; then
  python3 - "$out/cuda_bench.json" "$out/sdpa_peer.json" <<'EOF'
import json, os, sys
bench = json.load(open(sys.argv[1]))
peer = json.load(open(sys.argv[2]))["sdpa"] if os.path.exists(sys.argv[2]) else []
figs = bench["figures"]
print(f"  device: {bench['device']}")
for p in peer:
    if p["ours_ratio"] is not None:
        goal = "met" if p["ours_ratio"] >= 0.8 else "not met"
        print(f"  attention T={p['tokens']}: {p['ours_ratio']:.2f}x PyTorch SDPA (goal >= 0.8: {goal})")
for f in figs:
    if f["kind"] == "prefill":
        share = 100 * f["scoring_share"]
        print(f"  prefill T={int(f['tokens'])}: {f['tokens_per_s']:.0f} tok/s, scoring "
              f"{share:.2f}% (goal <= 2%: {'met' if share <= 2 else 'not met'})")
    if f["kind"] == "decode":
        print(f"  decode batch {int(f['batch'])}: {f['tokens_per_s']:.0f} tok/s")
paged = {f["format"]: f for f in figs if f["kind"] == "paged"}
if "fp16" in paged and "int8" in paged:
    r = paged["fp16"]["ms"] / paged["int8"]["ms"]
    print(f"  decode attention int8 vs fp16 pages: {r:.2f}x the speed (goal >= 1: "
          f"{'met' if r >= 1 else 'not met'})")
EOF
fi
echo "  result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
