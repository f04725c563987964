#!/usr/bin/env python3
"""End-to-end check of the K-quant formats (Q4_K, Q5_K, Q6_K) on a real model file.

llama.cpp's llama-quantize (tools/oracle/build_llama_server.sh builds it) requantizes the default
model to Q8_0 with every ffn_down tensor in one K-quant (the other projections are 576 wide, not a
multiple of the 256-element super-block, so llama.cpp would not K-quantize them), then for each
file the first 24 greedy tokens of three prompts from `glimpse generate` are compared with
Hugging Face transformers running the same GGUF dequantized to fp32 (the arithmetic Glimpse
follows). Prints, per file and prompt, how many tokens agree before the first difference.

Needs the oracle venv with torch (tools/oracle/setup_venv.sh --with-torch) and a built CLI:

    $VENV/bin/python tools/oracle/check_kquants.py [--glimpse build/tools/cli/glimpse]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]
TOKENS = 24


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glimpse", default=str(REPO / "build" / "tools" / "cli" / "glimpse"))
    ap.add_argument("--types", default="q4_k,q5_k,q6_k")
    a = ap.parse_args()
    import torch
    from llama_cpp import Llama
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(2)
    model = subprocess.run([sys.executable, str(REPO / "tools" / "setup" / "fetch_model.py")],
                           capture_output=True, text=True, check=True).stdout.strip()
    server = subprocess.run(["bash", str(REPO / "tools" / "oracle" / "build_llama_server.sh")],
                            capture_output=True, text=True, check=True).stdout.strip()
    quantize = os.path.join(os.path.dirname(server), "llama-quantize")
    ok = True
    with tempfile.TemporaryDirectory() as work:
        for k in a.types.split(","):
            path = os.path.join(work, f"smollm2-ffn_down-{k}.gguf")
            subprocess.run([quantize, "--allow-requantize", "--tensor-type", f"ffn_down={k}", model,
                            path, "q8_0", "2"], capture_output=True, check=True)
            vocab = Llama(model_path=path, vocab_only=True, verbose=False)
            reference = AutoModelForCausalLM.from_pretrained(work, gguf_file=os.path.basename(path),
                                                             dtype=torch.float32)
            agree = []
            for prompt in PROMPTS:
                ids = vocab.tokenize(prompt.encode(), add_bos=False)
                with torch.no_grad():
                    want = reference.generate(torch.tensor([ids]), max_new_tokens=TOKENS,
                                              do_sample=False)[0, len(ids):].tolist()
                run = subprocess.run([a.glimpse, "generate", "--model", path, "--prompt-tokens",
                                      ",".join(map(str, ids)), "--max-tokens", str(TOKENS), "--json"],
                                     capture_output=True, text=True, check=True)
                got = json.loads(run.stdout.strip().splitlines()[-1])["tokens"]
                same = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y),
                            min(len(want), len(got)))
                agree.append(f"{same}/{min(len(want), len(got))}")
                ok = ok and same == min(len(want), len(got))
            print(f"{k}: greedy tokens equal to transformers before the first difference: "
                  f"{', '.join(agree)}", flush=True)
            os.remove(path)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
