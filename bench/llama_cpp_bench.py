#!/usr/bin/env python3
"""Measures llama.cpp (through llama-cpp-python) on the default model, the yardstick for
bench/model_bench.cc, and prints one JSON object on stdout.

  prefill: a `--prompt-tokens`-token prompt (bench/prompt.txt tokenized, repeated to length) run
           in one batch from an empty cache; one warm-up run, then `--reps` runs; median tok/s.
  decode:  after the prompt, `--decode-tokens` greedy tokens one at a time (argmax of the last
           logits, no sampler, EOS ignored); `--reps` runs, median tok/s.
  peak_rss_mb: resource.getrusage(RUSAGE_SELF).ru_maxrss (mapped weights count once touched);
  cpu_s: the process's user + system CPU time, load and warm-up included.

Run with the oracle venv's python (tools/oracle/setup_venv.sh). `--dump-tokens FILE` writes the
prompt's token ids (one per line) so model_bench runs the same prompt.
"""
import argparse
import json
import os
import pathlib
import resource
import statistics
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent


def default_model() -> str:
    root = os.environ.get("GLIMPSE_CACHE_DIR") or os.path.expanduser("~/.cache/glimpse")
    return os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def prompt_tokens(llm, path: pathlib.Path, n: int) -> list:
    text = path.read_text(encoding="utf-8")
    base = [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)]
    if not base:
        sys.exit(f"llama_cpp_bench: {path} tokenizes to nothing")
    return (base * (n // len(base) + 1))[:n]


def last_logits(llm) -> np.ndarray:
    import llama_cpp
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def prefill(llm, tokens: list) -> float:
    """Runs `tokens` from an empty cache; returns seconds."""
    llm.reset()
    start = time.perf_counter()
    llm.eval(tokens)
    return time.perf_counter() - start


def decode(llm, n: int) -> float:
    """Greedy-decodes `n` tokens after whatever is in the cache; returns seconds."""
    start = time.perf_counter()
    for _ in range(n):
        llm.eval([int(np.argmax(last_logits(llm)))])
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=default_model())
    parser.add_argument("--threads", type=int, default=int(os.environ.get("GLIMPSE_THREADS", 2)))
    parser.add_argument("--prompt-file", type=pathlib.Path, default=HERE / "prompt.txt")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dump-tokens", type=pathlib.Path)
    args = parser.parse_args()

    import llama_cpp
    from llama_cpp import Llama
    if not os.path.exists(args.model):
        sys.exit(f"llama_cpp_bench: model {args.model} not found; run tools/setup/fetch_model.py")
    n_ctx = args.prompt_tokens + args.decode_tokens + 16
    start = time.perf_counter()
    llm = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=args.prompt_tokens,
                n_ubatch=args.prompt_tokens, n_threads=args.threads,
                n_threads_batch=args.threads, logits_all=False, verbose=False)
    load_s = time.perf_counter() - start
    tokens = prompt_tokens(llm, args.prompt_file, args.prompt_tokens)
    if args.dump_tokens:
        args.dump_tokens.write_text("".join(f"{t}\n" for t in tokens))

    prefill(llm, tokens)  # warm-up: page in the weights, size the compute buffers
    decode(llm, 8)
    prefill_s, decode_s = [], []
    for rep in range(args.reps):
        prefill_s.append(prefill(llm, tokens))
        decode_s.append(decode(llm, args.decode_tokens))
        print(f"llama.cpp rep {rep + 1}/{args.reps}: prefill {len(tokens) / prefill_s[-1]:.1f} "
              f"tok/s, decode {args.decode_tokens / decode_s[-1]:.1f} tok/s", file=sys.stderr)

    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "engine": "llama.cpp",
        "version": f"llama-cpp-python {llama_cpp.__version__}",
        "model": os.path.basename(args.model),
        "threads": args.threads,
        "prompt_tokens": len(tokens),
        "decode_tokens": args.decode_tokens,
        "reps": args.reps,
        "load_s": round(load_s, 3),
        "prefill_tok_s": round(len(tokens) / statistics.median(prefill_s), 2),
        "decode_tok_s": round(args.decode_tokens / statistics.median(decode_s), 2),
        "prefill_s": [round(s, 4) for s in prefill_s],
        "decode_s": [round(s, 4) for s in decode_s],
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
