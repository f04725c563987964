#!/usr/bin/env python3
"""Measures llama.cpp (through llama-cpp-python) on the default model, the yardstick for
bench/model_bench.cc, and prints one JSON object on stdout.

  prefill: a `--prompt-tokens`-token prompt (bench/prompt.txt tokenized, repeated to length) run
           in one batch from an empty cache; one warm-up run, then `--reps` runs; median tok/s.
  decode:  after the prompt, `--decode-tokens` greedy tokens one at a time (argmax of the last
           logits, no sampler, EOS ignored); `--reps` runs, median tok/s.
  batch:   with --batch B, B sequences (the prompt prefilled once, copied to the others with
           llama_memory_seq_cp; a KV cache split per sequence, as llama-server --parallel B) decode
           --decode-tokens greedy tokens each, one llama_decode of B tokens per step; tok/s over all.
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


def batch_decode(model_path: str, threads: int, tokens: list, batch: int, steps: int) -> float:
    """B sequences decoding together after the same prompt; returns the steps' seconds."""
    import llama_cpp as L
    P = len(tokens)
    model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"llama_cpp_bench: cannot load {model_path}")
    cp = L.llama_context_default_params()
    per_sequence = (P + steps + 17 + 255) // 256 * 256  # llama.cpp splits n_ctx in such cells
    cp.n_ctx = batch * per_sequence
    cp.n_batch = cp.n_ubatch = max(P, batch)
    cp.n_seq_max = batch
    cp.kv_unified = False
    cp.n_threads = cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    b = L.llama_batch_init(max(P, batch), 0, batch)

    def run(entries):  # [(token, pos, seq, wants_logits)]
        b.n_tokens = len(entries)
        for i, (t, p, s, lg) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, 1, lg
            b.seq_id[i][0] = s
        if L.llama_decode(ctx, b) != 0:
            sys.exit("llama_cpp_bench: llama_decode failed")

    def argmax(i):
        return int(np.argmax(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i),
                                                   shape=(n_vocab,))))

    run([(t, i, 0, i == P - 1) for i, t in enumerate(tokens)])
    memory = L.llama_get_memory(ctx)
    for s in range(1, batch):
        L.llama_memory_seq_cp(memory, 0, s, -1, -1)
    nxt = [argmax(P - 1)] * batch
    start = None
    for step in range(steps + 1):  # the first step sizes the batch's buffers: not timed
        if step == 1:
            start = time.perf_counter()
        run([(nxt[s], P + step, s, True) for s in range(batch)])
        nxt = [argmax(s) for s in range(batch)]
    seconds = time.perf_counter() - start
    L.llama_batch_free(b)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=default_model())
    parser.add_argument("--threads", type=int, default=int(os.environ.get("GLIMPSE_THREADS", 2)))
    parser.add_argument("--prompt-file", type=pathlib.Path, default=HERE / "prompt.txt")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dump-tokens", type=pathlib.Path)
    parser.add_argument("--batch", type=int, default=0)
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

    batch_s = None
    if args.batch > 0:
        batch_s = batch_decode(args.model, args.threads, tokens, args.batch, args.decode_tokens)
        print(f"llama.cpp batch {args.batch}: decode "
              f"{args.batch * args.decode_tokens / batch_s:.1f} tok/s", file=sys.stderr)

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
    if batch_s is not None:
        result["batch"] = args.batch
        result["batch_decode_tok_s"] = round(args.batch * args.decode_tokens / batch_s, 2)
        result["batch_decode_ratio"] = round(result["batch_decode_tok_s"] / result["decode_tok_s"], 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
