#!/usr/bin/env python3
"""Writes PyTorch's scores of the committed gate weights (and ForesightKV's, tools/foresight/) on
fixed prompts, for the C++ test.

tests/gate_artifact_test.cc runs the same files through Glimpse's runtime (the prefill's captured
attention inputs and the C++ scorers) and compares element by element. The PyTorch side is
transformers' own model (the GGUF dequantised to fp32) and gates_lib.py's modules loaded from the
files, so the two share nothing but the weights. Prompt token ids come from `glimpse generate
--json` (the chat template up to the end of the user turn).

  $VENV/bin/python tools/gates/make_fixture.py
"""
import argparse
import json
import pathlib
import platform
import shlex
import sys

import torch
import transformers
from safetensors.torch import load_file

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lookahead"))
sys.path.insert(0, str(HERE.parent / "foresight"))
sys.path.insert(0, str(HERE))  # first: its train.py, not LookaheadKV's or ForesightKV's
import foresight_lib as fl  # noqa: E402
import gates_lib as gl  # noqa: E402
import lookahead_lib as la  # noqa: E402
# train before make_scores_fixture: importing that one puts tools/lookahead (its train.py) first
from train import METHODS, Gates  # noqa: E402
from make_scores_fixture import PROMPTS, prompt_ids  # noqa: E402  (LookaheadKV's fixture prompts)

REPO = HERE.parents[1]


def load_gates(path: pathlib.Path, method: str, config) -> Gates:
    meta = json.loads(path.with_suffix(".json").read_text())["hyper_parameters"]
    args = argparse.Namespace(dg=meta["dg"], sinks=meta["sinks"], inner=meta["inner"])
    gates = Gates(method, config.num_hidden_layers, config.hidden_size,
                  config.num_key_value_heads,
                  config.num_attention_heads // config.num_key_value_heads, args)
    gates.load_tensors({k: v.float() for k, v in load_file(str(path)).items()})
    return gates.eval()


def rounded(x):
    """7 significant digits (fp32 carries ~7): a third of the fixture's size."""
    return [rounded(v) for v in x] if isinstance(x, list) else float(f"{x:.7g}")


def foresight_scores(model, weights: dict, token_ids: list) -> torch.Tensor:
    """[L, Hkv, T] ForesightKV scores of a prompt (foresight_lib.py): the window is the prompt's
    last W tokens, whose rows of the full forward pass's attention are the window attention."""
    window = int(weights["foresight.window"][0])
    attentions, cache = fl.full_pass(model, token_ids)
    hkv = model.config.num_key_value_heads
    group = model.config.num_attention_heads // hkv
    T = len(token_ids)
    layers = []
    for l, att in enumerate(attentions):
        heads = []
        for h in range(hkv):
            probs = fl.window_probs_from_attention(att[0, h * group:(h + 1) * group], T, window)
            x = fl.features(cache.layers[l].keys[0, h], cache.layers[l].values[0, h], probs)
            w = {k: v[l, h] for k, v in weights.items() if k != "foresight.window"}
            heads.append(fl.mlp(x, w["foresight.w1"], w["foresight.b1"], w["foresight.w2"],
                                w["foresight.b2"]))
        layers.append(torch.stack(heads))
    return torch.stack(layers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/glimpse/models/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--glimpse", default=str(REPO / "build/tools/cli/glimpse"))
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/gates/smollm2_scores.json"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    gguf = pathlib.Path(args.model)
    model = la.load_model(gguf)
    ids = [prompt_ids(args.glimpse, text) for text in PROMPTS]
    hidden = [gl.attention_inputs(model, i) for i in ids]
    gates = {}
    for method in METHODS:
        path = REPO / "models/lookahead" / f"{gguf.stem}.{method}.safetensors"
        module = load_gates(path, method, model.config)
        with torch.no_grad():
            cases = [{"token_ids": i, "scores": rounded(module.score_all(h).tolist())}
                     for i, h in zip(ids, hidden)]
        gates[method] = {"file": path.name, "cases": cases}
    path = REPO / "models/lookahead" / f"{gguf.stem}.foresightkv.safetensors"
    gates["foresightkv"] = {"file": path.name,
                            "cases": [{"token_ids": i, "scores": rounded(foresight_scores(
                                model, load_file(str(path)), i).tolist())} for i in ids]}
    doc = {
        "generated_by": "tools/gates/make_fixture.py",
        "command": shlex.join(["python3", "tools/gates/make_fixture.py"] + sys.argv[1:]),
        "tool_versions": {"python": platform.python_version(), "torch": torch.__version__,
                          "transformers": transformers.__version__},
        "gates": gates,
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc) + "\n")
    lengths = [len(i) for i in ids]
    print(f"wrote {out}: {len(gates)} scorers x {len(ids)} prompts of {lengths} tokens")


if __name__ == "__main__":
    main()
