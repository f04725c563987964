#!/usr/bin/env bash
# `make bench`: our runtime against llama.cpp on the default model, same prompt, same threads.
#
#   bench/run_model_bench.sh [--threads N] [--rounds N] [--batch B] [--check]
#
# Runs bench/llama_cpp_bench.py in the oracle venv (made by tools/oracle/setup_venv.sh when
# missing: llama-cpp-python + numpy only, no torch) and $BUILD_DIR/bench/glimpse_bench_model on
# the very token ids llama.cpp used. The two never run at once; they alternate for --rounds rounds
# (one warm-up + one measured run per process) so that load from other work on a shared machine
# falls on both alike, and the median (and best) over rounds is reported. Prints a table and the
# ratios ours/llama.cpp against the goals (prefill >= 1.0x, decode >= 0.5x), warns when other work
# took CPU during a run (/proc/stat busy time minus the run's own CPU time), and writes every run
# to $BUILD_DIR/bench/model_bench.json. With --batch B, both also decode B sequences in one step
# each (llama_decode of B tokens; our model::ForwardPass of B rows) and the table adds their
# aggregate decode tok/s and ratio. With --check, exits 1 when a
# goal is missed. Env: BUILD_DIR (default build), GLIMPSE_THREADS (default 2), GLIMPSE_MODEL.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" = /* ]] || build_dir="$repo/$build_dir"
threads="${GLIMPSE_THREADS:-2}"
rounds=3
check=0
batch=0
while (($#)); do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --batch) batch="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run_model_bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

bin="$build_dir/bench/glimpse_bench_model"
if [[ ! -x "$bin" ]]; then
  echo "run_model_bench.sh: $bin not built; run 'make build' (or set BUILD_DIR)" >&2
  exit 1
fi
model="${GLIMPSE_MODEL:-$(python3 "$repo/tools/setup/fetch_model.py")}"
venv="$(bash "$repo/tools/oracle/setup_venv.sh")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --threads "$threads" --reps 1 --prompt-tokens 512 --decode-tokens 128)
((batch == 0)) || common+=(--batch "$batch")

# "uptime_s busy_s": busy = user+nice+system+irq+softirq+steal over all cores, from /proc/stat.
# A run's busy time minus its own cpu_s is what other work (and the hypervisor) took meanwhile.
hz="$(getconf CLK_TCK)"
snapshot() {
  awk -v hz="$hz" 'NR == FNR { up = $1; next }
    /^cpu / { printf "%s %.2f", up, ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/uptime /proc/stat
}
# run_one ENGINE CMD...: runs CMD (JSON on stdout) and appends "before after json" to ENGINE.jsonl.
run_one() {
  local engine="$1" before after
  shift
  before="$(snapshot)"
  "$@" >"$work/run.json" || return
  after="$(snapshot)"
  printf '%s %s %s\n' "$before" "$after" "$(cat "$work/run.json")" >>"$work/$engine.jsonl"
}

ours_rc=0
for ((round = 1; round <= rounds; round++)); do
  echo "bench: round $round/$rounds, llama.cpp then glimpse, $threads threads" >&2
  run_one llama_cpp "$venv/bin/python" "$repo/bench/llama_cpp_bench.py" "${common[@]}" \
    --dump-tokens "$work/tokens.txt"
  ((ours_rc == 0)) || continue
  run_one glimpse "$bin" "${common[@]}" --tokens "$work/tokens.txt" || ours_rc=$?
done
touch "$work/glimpse.jsonl"

mkdir -p "$build_dir/bench"
python3 - "$work/llama_cpp.jsonl" "$work/glimpse.jsonl" "$build_dir/bench/model_bench.json" \
  "$ours_rc" "$check" "$(nproc)" <<'EOF'
import json, statistics, sys

ref_path, ours_path, out_path, ours_rc, check, ncpu = sys.argv[1:7]
GOALS = {"prefill_tok_s": 1.0, "decode_tok_s": 0.5}


def best(key):
    return key.replace("_tok_s", "_best_tok_s")


def summarize(path):
    runs = []
    for line in open(path):
        up0, busy0, up1, busy1, doc = line.split(" ", 4)
        run = json.loads(doc)
        wall = float(up1) - float(up0)
        others = max(0.0, float(busy1) - float(busy0) - run["cpu_s"])
        run.update(wall_s=round(wall, 2), others_cpu_s=round(others, 2),
                   others_share=round(others / (wall * int(ncpu)), 3))
        runs.append(run)
    if not runs:
        return None
    out = dict(runs[0])
    for key in ("prefill_tok_s", "decode_tok_s"):
        out[key] = statistics.median(r[key] for r in runs)
        out[best(key)] = max(r[key] for r in runs)
    if "batch_decode_tok_s" in runs[0]:
        out["batch_decode_tok_s"] = statistics.median(r["batch_decode_tok_s"] for r in runs)
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    out["rounds"] = len(runs)
    out["runs"] = runs
    return out


ref = summarize(ref_path)
ours = summarize(ours_path) if ours_rc == "0" else None
rows = [ref] + ([ours] if ours else [])
print(f"{'engine':<12} {'prefill tok/s':>14} {'decode tok/s':>13} {'peak RSS MB':>12}   "
      "best-of-rounds prefill / decode")
for r in rows:
    print(f"{r['engine']:<12} {r['prefill_tok_s']:>14.1f} {r['decode_tok_s']:>13.1f} "
          f"{r['peak_rss_mb']:>12.1f}   {r[best('prefill_tok_s')]:.1f} / "
          f"{r[best('decode_tok_s')]:.1f}")
print(f"({ref['prompt_tokens']}-token prompt, {ref['decode_tokens']} greedy decode tokens, "
      f"{ref['threads']} threads, median of {ref['rounds']} alternating rounds)")
busiest = max(r["others_share"] for row in rows for r in row["runs"])
if busiest > 0.1:
    print(f"warning: other work took up to {busiest:.0%} of the {ncpu} cores during a run, so "
          "these numbers are noisy (llama.cpp's spinning threads suffer most); best-of-rounds "
          "is the fairer view, an idle machine the only one to quote")
missed = []
if ours is None:
    print(f"glimpse: glimpse_bench_model failed (exit {ours_rc}); see its message above")
    missed.append("glimpse run")
else:
    for key, goal in GOALS.items():
        ratio = ours[key] / ref[key]
        ok = ratio >= goal
        if not ok:
            missed.append(key)
        name = key.split("_")[0]
        best_ratio = ours[best(key)] / ref[best(key)]
        print(f"ratio ours/llama.cpp {name:<8} {ratio:5.2f}x  (goal >= {goal:.1f}x: "
              f"{'met' if ok else 'MISSED'}; best-of-rounds {best_ratio:.2f}x)")
    print(f"ratio ours/llama.cpp peak RSS {ours['peak_rss_mb'] / ref['peak_rss_mb']:5.2f}x")
    if "batch_decode_tok_s" in ours and "batch_decode_tok_s" in ref:
        print(f"batched decode, {ref['batch']} sequences: llama.cpp {ref['batch_decode_tok_s']:.1f} "
              f"tok/s ({ref['batch_decode_tok_s'] / ref['decode_tok_s']:.2f}x its one sequence), "
              f"ours {ours['batch_decode_tok_s']:.1f} tok/s "
              f"({ours['batch_decode_tok_s'] / ours['decode_tok_s']:.2f}x); ratio ours/llama.cpp "
              f"{ours['batch_decode_tok_s'] / ref['batch_decode_tok_s']:.2f}x")
json.dump({"llama_cpp": ref, "glimpse": ours, "goals": GOALS, "missed": missed},
          open(out_path, "w"), indent=1)
print(f"results: {out_path}")
sys.exit(1 if missed and (check == "1" or ours is None) else 0)
EOF
