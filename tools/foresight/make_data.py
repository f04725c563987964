#!/usr/bin/env python3
"""Makes ForesightKV training data for the default model: long generations over training texts.

Texts: the user messages of LookaheadKV's training examples (tools/lookahead/make_data.py:
licences, Debian copyright files, Python sources and synthetic records, never the evaluation
families), each with its question replaced by an instruction that asks for a long answer (four
instructions, in turn). The trace is the model's own greedy generation (<= 256 tokens) from
Glimpse's runtime (`glimpse generate --json`, which matches transformers fp32 on this model).

Output: DIR/traces.jsonl, one {"source", "instruction", "prompt_len", "ids"} per line (ids: the
chat prompt, its first prompt_len ids, then the trace), and DIR/provenance.json. Default DIR:
~/.cache/glimpse/foresight-data/<model stem>.
Resumable: existing lines are kept.

  python3 tools/foresight/make_data.py [--count 48] [--glimpse build/tools/cli/glimpse]
"""
import argparse
import json
import pathlib
import platform
import shlex
import subprocess
import sys

import torch
from tqdm import tqdm

REPO = pathlib.Path(__file__).resolve().parents[2]
INSTRUCTIONS = [
    "Retell the text above in your own words, in detail.",
    "Explain the text above step by step, in at least 200 words.",
    "Write a long, detailed commentary on the text above.",
    "Describe everything the text above says, point by point.",
]


def user_text(tokenizer, prompt_ids: list) -> str:
    """The user message of a templated prompt, without its final question."""
    text = tokenizer.decode(prompt_ids)
    body = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    return body.rsplit("\n\n", 1)[0]


def generate(glimpse: str, model: str, prompt: str) -> tuple:
    out = subprocess.run([glimpse, "generate", "--model", model, "--chat", "--prompt", prompt,
                          "--max-tokens", "256", "--json"],
                         check=True, capture_output=True, text=True)
    doc = json.loads(out.stdout.splitlines()[-1])
    return doc["prompt_tokens"], doc["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/glimpse/models/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--lookahead-data", default=None,
                    help="LookaheadKV's data directory (default: its default for the model)")
    ap.add_argument("--glimpse", default=str(REPO / "build/tools/cli/glimpse"))
    ap.add_argument("--count", type=int, default=48)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    stem = pathlib.Path(args.model).stem
    source = pathlib.Path(args.lookahead_data or pathlib.Path.home() /
                          f".cache/glimpse/lookahead-data/{stem}")
    out = pathlib.Path(args.out or pathlib.Path.home() / f".cache/glimpse/foresight-data/{stem}")
    out.mkdir(parents=True, exist_ok=True)
    paths = sorted((source / "examples").glob("*.pt"))[:args.count]
    if len(paths) < args.count:
        sys.exit(f"{source}/examples has {len(paths)} examples: run tools/lookahead/make_data.py")
    from transformers import AutoTokenizer
    model_path = pathlib.Path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(str(model_path.parent), gguf_file=model_path.name)
    traces = out / "traces.jsonl"
    done = {json.loads(line)["source"] for line in traces.open()} if traces.exists() else set()
    with traces.open("a") as f:
        for i, path in enumerate(tqdm(paths, desc="traces", unit="ex")):
            if path.name in done:
                continue
            ex = torch.load(path)
            instruction = INSTRUCTIONS[i % len(INSTRUCTIONS)]
            prompt = user_text(tokenizer, ex["prompt_ids"]) + "\n\n" + instruction
            prompt_ids, trace = generate(args.glimpse, args.model, prompt)
            f.write(json.dumps({"source": path.name, "instruction": instruction,
                                "prompt_len": len(prompt_ids), "ids": prompt_ids + trace}) + "\n")
            f.flush()
    (out / "provenance.json").write_text(json.dumps({
        "generated_by": "tools/foresight/make_data.py",
        "command": shlex.join([sys.executable] + sys.argv),
        "texts": str(source), "count": args.count, "instructions": INSTRUCTIONS,
        "python": platform.python_version()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
