#!/usr/bin/env python3
"""Writes PyTorch's LookaheadKV scores of a trained module on fixed prompts, for the C++ test.

tests/lookahead_artifact_test.cc runs the same module through Glimpse's runtime
(core/eviction/lookahead_pass.h) and compares element by element. The PyTorch side is
transformers' own model (the GGUF dequantised to fp32, eager attention) with the LoRA hooked onto
the lookahead rows (lookahead_lib.py), so the two share nothing but the module file. Prompt token
ids come from `glimpse generate --json` (the chat template up to the end of the user turn).

  $VENV/bin/python tools/lookahead/make_scores_fixture.py \
      --module models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors
"""
import argparse
import json
import pathlib
import platform
import shlex
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import lookahead_lib as la  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
PROMPTS = [
    "The parcel for Marta was left at the north gate. The parcel for Ivo went to the library. "
    "Where was the parcel for Marta left?",
    "def area(w, h):\n    return w * h\n\nprint(area(3, 4))\n\nWhat does this program print?",
]
ASSISTANT_HEADER = 3


def prompt_ids(glimpse: str, text: str) -> list:
    out = subprocess.run([glimpse, "generate", "--chat", "--prompt", text, "--max-tokens", "1",
                          "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])["prompt_tokens"][:-ASSISTANT_HEADER]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/glimpse/models/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--module", required=True)
    ap.add_argument("--glimpse", default=str(REPO / "build/tools/cli/glimpse"))
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/lookahead/smollm2_scores.json"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = la.load_model(pathlib.Path(args.model))
    tensors = load_file(args.module)
    meta = json.loads(pathlib.Path(args.module).with_suffix(".json").read_text())
    hp = meta["hyper_parameters"]
    module = la.LookaheadModule(model, hp["n_lookahead"], hp["rank"], hp["alpha"], [0])
    module.load_tensors(tensors)
    cases = []
    with torch.no_grad():
        for text in PROMPTS:
            ids = prompt_ids(args.glimpse, text)
            scores = la.lookahead_scores(model, module, la.prompt_cache(model, ids))
            cases.append({"token_ids": ids, "scores": scores.tolist()})
    doc = {
        "generated_by": "tools/lookahead/make_scores_fixture.py",
        "command": shlex.join(["python3", "tools/lookahead/make_scores_fixture.py"] + sys.argv[1:]),
        "tool_versions": {"python": platform.python_version(), "torch": torch.__version__,
                          "transformers": transformers.__version__},
        "module": pathlib.Path(args.module).name,
        "cases": cases,
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc) + "\n")
    print(f"wrote {out}: {len(cases)} prompts of {[len(c['token_ids']) for c in cases]} tokens")


if __name__ == "__main__":
    main()
