#!/usr/bin/env python3
"""Runs NVIDIA kvpress on the quality suite's tasks, as `glimpse eval` runs them, for the figures
beside Glimpse's in docs/eviction_quality.md.

Input: the JSON `glimpse eval --export FILE` writes (every task as token ids: the evicted prompt,
the tokens fed after eviction before the scored answer, the expected answer). Convention, the same
as Glimpse's and kvpress's own pipeline: the press compresses the evicted prompt in one prefill;
the fed tokens and the greedy answer (at most max_answer_tokens, stopping at an end-of-generation
token) run over the compressed cache at their original positions. Accuracy uses Glimpse's rule
(core/eviction/eval/metrics.h AnswerMatches: the expected number or word as a whole one, letters
without case). KL is runner.h's: the mean over the answer's rows of KL(full || press) of the
next-token distributions, the full cache's own greedy answer (kvpress's full cache here)
teacher-forced; of a two-turn task the scored turn's answer only (Glimpse's averages both turns).

Presses at kvpress 0.5.5's own defaults, compression_ratio = 1 - budget. kvpress keeps
floor(T * budget) entries of a T-token prompt; Glimpse keeps max(ceil(T * budget), sinks + window)
(core/eviction/profile.h SelectionFor: never fewer than its forced entries, 68 for SnapKV's
built-in 4 sinks + W 64, more than 10 % of a prompt under 680 tokens). With --count glimpse the
ratio is set per task so that kvpress keeps Glimpse's count under its built-in settings. Presses:
  snapkv              SnapKVPress()              (window 64, kernel 5)
  pyramidkv           PyramidKVPress()           (window 64, kernel 5, beta 20)
  streamingllm        StreamingLLMPress()        (4 sinks)
  expected_attention  ExpectedAttentionPress()   (512 future positions, 4 sinks)

Run (oracle venv with torch, transformers and kvpress: tools/oracle/setup_venv.sh --with-torch):
  build/tools/cli/glimpse eval --tasks 6 --methods snapkv --budgets 0.1 --export /tmp/tasks.json
  $VENV/bin/python tools/oracle/kvpress_eval.py --tasks /tmp/tasks.json --out kvpress-eval.json
"""
import argparse
import json
import math
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_kvpress_fixtures as base  # noqa: E402

PRESSES = ("snapkv", "pyramidkv", "streamingllm", "expected_attention")


def answer_matches(answer: str, expected: str) -> bool:
    """core/eviction/eval/metrics.cc AnswerMatches."""
    if not expected:
        return False
    a, e = answer.lower(), expected.lower()

    def joins(x, y):
        return (x.isdigit() and y.isdigit()) or (x.isalpha() and y.isalpha())

    at = a.find(e)
    while at >= 0:
        end = at + len(e)
        left = at == 0 or not joins(a[at - 1], e[0])
        right = end == len(a) or not joins(a[end], e[-1])
        if left and right:
            return True
        at = a.find(e, at + 1)
    return False


def make_press(name, ratio):
    from kvpress.presses.expected_attention_press import ExpectedAttentionPress
    from kvpress.presses.pyramidkv_press import PyramidKVPress
    from kvpress.presses.snapkv_press import SnapKVPress
    from kvpress.presses.streaming_llm_press import StreamingLLMPress
    classes = {"snapkv": SnapKVPress, "pyramidkv": PyramidKVPress,
               "streamingllm": StreamingLLMPress, "expected_attention": ExpectedAttentionPress}
    return base.shim_cache_position(classes[name](compression_ratio=ratio))


# Glimpse's forced entries under its built-in settings: 4 sinks + the scorer's window (SnapKV's
# W 64) or the 32-entry recent window of a scorer without one.
GLIMPSE_FORCED = {"snapkv": 68, "pyramidkv": 68, "streamingllm": 36, "expected_attention": 36}


def glimpse_ratio(press, budget, tokens):
    """The compression_ratio under which kvpress keeps what Glimpse keeps of `tokens` at `budget`,
    max(ceil(budget * T), forced) capped at T, where kvpress keeps int(T * (1 - ratio)); half an
    entry above that count keeps float error off the floor."""
    kept = min(tokens, max(math.ceil(budget * tokens), GLIMPSE_FORCED[press]))
    return max(0.0, 1.0 - (kept + 0.5) / tokens)


def continue_from(model, cache, position, logits, script, max_tokens, stop_ids):
    """From the cache (its next row at `position`, `logits` predicting it): the greedy answer
    (script None) or the script teacher-forced. Returns (tokens, log-softmax of every row that
    predicts one of them); the answer includes its end-of-generation token, as Glimpse's does.

    One token at a time: PyramidKV keeps a different number of entries per layer, and a
    multi-token step's attention mask is sized from layer 0's cache (transformers 5), which then
    fails on the other layers; a single query needs no mask. The same computation."""
    import torch
    ids, rows = [], []
    while len(ids) < (len(script) if script is not None else max_tokens):
        rows.append(torch.log_softmax(logits.double(), dim=-1))
        token = script[len(ids)] if script is not None else int(logits.argmax())
        ids.append(token)
        if script is None and token in stop_ids:
            break
        out = model(input_ids=torch.tensor([[token]]), past_key_values=cache,
                    position_ids=torch.tensor([[position]]), use_cache=True)
        logits, position = out.logits[0, -1], position + 1
    return ids, rows


def run(model, context, fed, max_tokens, stop_ids, press, script):
    """Prefills `context` under the press, feeds `fed`, then the greedy answer and, with a
    script (the full cache's answer), the log-probs of each row along it (on a copy of the
    cache)."""
    import contextlib
    import copy
    import torch
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        with press(model) if press is not None else contextlib.nullcontext():
            model.model(input_ids=torch.tensor([context]), past_key_values=cache, use_cache=True)
        position = len(context)
        for token in fed:
            out = model(input_ids=torch.tensor([[token]]), past_key_values=cache,
                        position_ids=torch.tensor([[position]]), use_cache=True)
            position += 1
        logits = out.logits[0, -1]
        forced = None
        if script is not None:
            forced = continue_from(model, copy.deepcopy(cache), position, logits, script,
                                   max_tokens, stop_ids)[1]
        ids, rows = continue_from(model, cache, position, logits, None, max_tokens, stop_ids)
    return ids, rows if script is None else forced


def mean_kl(full_rows, rows):
    """Mean over the answer's rows of KL(full || evicted), nats (runner.h's kl)."""
    import torch
    kl = [float(torch.sum(torch.exp(f) * (f - e))) for f, e in zip(full_rows, rows)]
    return sum(kl) / max(len(kl), 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_model = os.path.expanduser("~/.cache/glimpse/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--model", default=os.environ.get("GLIMPSE_MODEL", default_model))
    parser.add_argument("--tasks", required=True, help="glimpse eval --export output")
    parser.add_argument("--presses", default=",".join(PRESSES))
    parser.add_argument("--budgets", default="0.1,0.2,0.3,0.5")
    parser.add_argument("--out", required=True, help="JSON with every answer and the table")
    parser.add_argument("--count", choices=("kvpress", "glimpse"), default="kvpress",
                        help="how many entries a budget keeps: kvpress's floor(T * budget) or "
                             "Glimpse's max(ceil(T * budget), sinks + window)")
    args = parser.parse_args()
    doc = json.loads(pathlib.Path(args.tasks).read_text())
    presses = [p for p in args.presses.split(",") if p]
    budgets = [float(b) for b in args.budgets.split(",") if b]
    base.import_presses()  # kvpress's modules without its package __init__
    model, tok = base.load_model(args.model)
    stop_ids = {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    runs = [("full", 1.0)] + [(p, b) for p in presses for b in budgets]
    results, start = [], time.time()
    for i, task in enumerate(doc["tasks"]):
        row = {"kind": task["kind"], "seed": task["seed"], "expected": task["expected"],
               "glimpse_full_answer": task["full_answer"], "answers": {}}
        full_ids, full_rows = None, None
        for method, budget in runs:
            tokens = len(task["evicted_prompt"])
            if method == "full":
                press = None
            elif args.count == "glimpse":
                press = make_press(method, glimpse_ratio(method, budget, tokens))
            else:
                press = make_press(method, 1.0 - budget)
            ids, rows = run(model, task["evicted_prompt"], task["fed_before_answer"],
                            doc["max_answer_tokens"], stop_ids, press, full_ids)
            if method == "full":
                full_ids, full_rows = ids, rows
            text = tok.decode([t for t in ids if t not in stop_ids], skip_special_tokens=True)
            row["answers"][f"{method}@{budget}"] = {"answer": text,
                                                   "correct": answer_matches(text, task["expected"]),
                                                   "kl": mean_kl(full_rows, rows)}
        results.append(row)
        print(f"kvpress eval: task {i + 1}/{len(doc['tasks'])} ({time.time() - start:.0f} s)",
              file=sys.stderr)
    table = {}
    for method, budget in runs:
        key = f"{method}@{budget}"
        by_kind = {}
        for r in results:
            by_kind.setdefault(r["kind"], []).append(r["answers"][key]["correct"])
        table[key] = {"accuracy": sum(sum(v) for v in by_kind.values()) / len(results),
                      "kl": sum(r["answers"][key]["kl"] for r in results) / len(results),
                      "by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())}}
    prov = base.provenance(args.model)
    prov["generated_by"] = "tools/oracle/kvpress_eval.py"
    prov["command"] = prov["command"].replace("make_kvpress_fixtures.py", "kvpress_eval.py")
    pathlib.Path(args.out).write_text(json.dumps(
        {**prov, "tasks_from": doc["command"], "table": table, "tasks": results}, indent=1) + "\n")
    for key, row in table.items():
        kinds = " ".join(f"{k} {100 * v:.0f}%" for k, v in row["by_kind"].items())
        print(f"{key:28s} {100 * row['accuracy']:5.1f}%  KL {row['kl']:.3f}  {kinds}")


if __name__ == "__main__":
    main()
