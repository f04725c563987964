#!/usr/bin/env bash
# `make bench-load`: concurrent multi-turn sessions through Glimpse's cluster (the cluster
# benchmark's load experiment) against llama.cpp's own server at the same N
# (bench/llama_server_load.py: `llama-server --parallel N --cont-batching`, built once by
# tools/oracle/build_llama_server.sh from the llama.cpp the oracle venv uses), on the same GGUF,
# the same threads and the same conversations. The two never run at once; they alternate for
# --rounds rounds and the table takes each figure's median. Prints both tables and, per N,
# Glimpse ÷ llama-server tokens/s (goal at 8 sessions: >= 1.0x) and each one's N ÷ 1 session
# (Glimpse's goal at 8: >= 3x).
#
#   bench/run_load_anchor.sh [--rounds R] [--sessions N,N,...]
#
# Env: BUILD_DIR (default build), GLIMPSE_THREADS (default 2), GLIMPSE_MODEL.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" = /* ]] || build_dir="$repo/$build_dir"
threads="${GLIMPSE_THREADS:-2}"
rounds=1
sessions=1,2,4,8,16
while (($#)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --sessions) sessions="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run_load_anchor.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

bench="$build_dir/bench/glimpse_bench_cluster"
[[ -x "$bench" ]] || { echo "run_load_anchor.sh: $bench not built" >&2; exit 1; }
model="${GLIMPSE_MODEL:-$(python3 "$repo/tools/setup/fetch_model.py")}"
server="$(bash "$repo/tools/oracle/build_llama_server.sh")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for ((round = 1; round <= rounds; round++)); do
  echo "bench-load: round $round/$rounds: glimpse, then llama-server" >&2
  "$bench" --experiments load --sessions "$sessions" --threads "$threads" \
    --json "$work/glimpse-$round.json" >"$work/glimpse-$round.txt"
  python3 "$repo/bench/llama_server_load.py" --server "$server" --model "$model" \
    --sessions "$sessions" --threads "$threads" --json "$work/llama-$round.json" \
    >"$work/llama-$round.txt"
done
cat "$work/glimpse-$rounds.txt" "$work/llama-$rounds.txt"

python3 - "$work" "$rounds" "$build_dir/load_anchor.json" <<'EOF'
import json, statistics, sys
work, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(name, r):
    data = json.load(open(f"{work}/{name}-{r}.json"))
    return {x["sessions"]: x for x in (data["load"]["runs"] if name == "glimpse" else data["runs"])}
keys = ["tokens_per_s", "ttft_p50_s", "itl_p50_s", "itl_p99_s"]
def medians(name):
    per = [runs(name, r) for r in range(1, rounds + 1)]
    return {n: {k: statistics.median(p[n][k] for p in per) for k in keys} for n in per[0]}
g, l = medians("glimpse"), medians("llama")
first = min(g)
print(f"\nGlimpse vs llama-server, medians of {rounds} round(s)")
print("| sessions | Glimpse tok/s | llama-server tok/s | Glimpse ÷ llama-server | Glimpse N ÷ 1 | "
      "llama-server N ÷ 1 | TTFT p50 s G / L | ITL p50 s G / L |\n|---|---|---|---|---|---|---|---|")
rows = []
for n in sorted(g):
    row = {"sessions": n, "glimpse": g[n], "llama_server": l[n],
           "ratio": g[n]["tokens_per_s"] / l[n]["tokens_per_s"],
           "glimpse_scaling": g[n]["tokens_per_s"] / g[first]["tokens_per_s"],
           "llama_server_scaling": l[n]["tokens_per_s"] / l[first]["tokens_per_s"]}
    rows.append(row)
    print(f"| {n} | {g[n]['tokens_per_s']:.1f} | {l[n]['tokens_per_s']:.1f} | {row['ratio']:.2f}× | "
          f"{row['glimpse_scaling']:.2f}× | {row['llama_server_scaling']:.2f}× | "
          f"{g[n]['ttft_p50_s']:.3f} / {l[n]['ttft_p50_s']:.3f} | "
          f"{g[n]['itl_p50_s']:.4f} / {l[n]['itl_p50_s']:.4f} |")
json.dump({"rounds": rounds, "rows": rows}, open(out, "w"), indent=1)
print(f"wrote {out}")
EOF
