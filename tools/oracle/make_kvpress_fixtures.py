#!/usr/bin/env python3
"""Writes kvpress cross-check fixtures: which KV entries NVIDIA's kvpress keeps, per layer and
kv-head, for the default model on two fixed prompts (tests/kvpress_test.cc compares our eviction
pipeline against them).

Presses (kvpress defaults unless noted), each at compression ratios 0.5 and 0.8. SnapKV and PyramidKV
use window_size=32 (the SnapKV paper's W) instead of kvpress's 64: at ratio 0.8 a ~300-token prompt
keeps int(294 * 0.2) = 58 < 64 entries, and kvpress would then keep an arbitrary 58 of the 64 window
entries, all tied at max + 1 (our selection rejects a budget below the window instead).
  snapkv              SnapKVPress(window_size=32, kernel_size=5)
  streamingllm        StreamingLLMPress(n_sink=4)
  pyramidkv           PyramidKVPress(window_size=32, kernel_size=5, beta=20)
  expected_attention  ExpectedAttentionPress(n_future_positions=512, n_sink=4, use_covariance=True,
                      use_vnorm=True, epsilon=0)

How kept indices are extracted: the press's compress() is wrapped; after the original returns the
gathered keys [1, Hkv, n_kept, hd], each kept row is located in the layer's input keys by exact
equality (gather copies rows bit for bit), so the indices are exactly what kvpress kept, whatever
topk did with ties. The wrapped score() also records, per head, the kvpress scores on either side of
the cut (k-th and (k+1)-th largest), so near-ties on kvpress's side are visible in the fixture.

The model is the default GGUF loaded by transformers (dequantized to fp32, as in make_golden.py),
HF_HUB_OFFLINE=1, attention "eager" is not needed (SnapKV recomputes its window attention).
kvpress's package __init__ imports optional dependencies (datasets, peft) and patches attention
functions; neither is needed here, so the press modules are imported without running it. kvpress
0.5.5 declares transformers<5.3 but our venv pins transformers 5.23.0 (setup_venv.sh installs kvpress
with --no-deps); the only incompatibility met is the missing cache_position kwarg, shimmed below.

Outputs, each recording the kvpress version, settings and exact command:
  tests/fixtures/kvpress/prompts.json           {"prompts": [{"name", "text", "tokens"}]}
  tests/fixtures/kvpress/<method>_cr<ratio>.json {"method", "press", "settings",
      "compression_ratio", "cases": [{"prompt", "n_tokens", "layers": [{"n_kept",
      "heads": [{"kept": HEX, "cut": [s_k, s_k+1]}]}]}]}
  HEX is a bitmask of kept positions: byte i (two hex digits) holds positions 8i..8i+7, bit p % 8.

Run (needs the oracle venv with torch, transformers and kvpress: tools/oracle/setup_venv.sh
--with-torch):
  $VENV/bin/python tools/oracle/make_kvpress_fixtures.py [--model PATH]
"""
import argparse
import importlib.util
import json
import os
import pathlib
import platform
import shlex
import sys
import time
import types

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "fixtures" / "kvpress"
sys.path.insert(0, str(REPO / "tools" / "setup"))
from fetch_model import SHA256 as MODEL_SHA256  # noqa: E402

N_THREADS = 2
RATIOS = (0.5, 0.8)
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

PASSAGES = {
    "lighthouse": (
        "The lighthouse on Carrow Point was built in 1871 from granite quarried on the island "
        "itself. Its first keeper, Elspeth Marr, kept a logbook for thirty-two years, recording "
        "every ship that passed, the height of the waves and the colour of the evening sky. In the "
        "winter of 1893 a storm destroyed the lower stairway, and for six weeks she climbed a rope "
        "ladder to light the lamp each night. The lamp burned colza oil until 1904, then paraffin, "
        "and was finally electrified in 1951, when a cable was laid across the sound. The keepers "
        "grew potatoes and kale in a walled garden behind the tower, kept two goats, and received "
        "supplies every second Thursday from the mail boat Osprey. In 1987 the light was automated "
        "and the last keeper, Tomas Reid, moved to the mainland, taking the logbooks with him. They "
        "are now held in the county archive, where researchers have used them to reconstruct a "
        "century of storms along the northern coast. The tower still stands, painted white with a "
        "single red band, and its beam can be seen twenty-two nautical miles out to sea."),
    "recipe": (
        "To make the bread, dissolve seven grams of dried yeast in three hundred millilitres of warm "
        "water with a teaspoon of honey, and leave it for ten minutes until it foams. Mix five "
        "hundred grams of strong white flour with ten grams of salt in a large bowl, make a well in "
        "the centre, and pour in the yeast mixture together with two tablespoons of olive oil. Stir "
        "with a wooden spoon until a shaggy dough forms, then turn it out onto a floured surface "
        "and knead for ten minutes, until it is smooth and springs back when pressed. Place the "
        "dough in an oiled bowl, cover it with a damp cloth, and leave it somewhere warm for an "
        "hour, or until it has doubled in size. Knock it back, shape it into a round loaf, and set "
        "it on a baking tray dusted with semolina. Let it rise for another forty minutes while the "
        "oven heats to two hundred and twenty degrees. Slash the top with a sharp knife, bake for "
        "thirty minutes, and cool on a wire rack before slicing. The loaf keeps for three days "
        "wrapped in linen, and makes excellent toast."),
}
QUESTIONS = {
    "lighthouse": "Who was the last keeper, and what did he take with him?",
    "recipe": "How long should the dough rise the first time, and at what temperature is it baked?",
}


def chatml(msg: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
            f"<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n")


def import_presses():
    """Imports the four press classes without running kvpress/__init__.py (see module doc)."""
    spec = importlib.util.find_spec("kvpress")
    if spec is None:
        sys.exit("kvpress is not installed: tools/oracle/setup_venv.sh --with-torch")
    pkg = types.ModuleType("kvpress")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["kvpress"] = pkg
    from kvpress.presses.expected_attention_press import ExpectedAttentionPress
    from kvpress.presses.pyramidkv_press import PyramidKVPress
    from kvpress.presses.snapkv_press import SnapKVPress
    from kvpress.presses.streaming_llm_press import StreamingLLMPress
    return {
        "snapkv": (SnapKVPress, {"window_size": 32, "kernel_size": 5}),
        "streamingllm": (StreamingLLMPress, {"n_sink": 4}),
        "pyramidkv": (PyramidKVPress, {"window_size": 32, "kernel_size": 5, "beta": 20}),
        "expected_attention": (ExpectedAttentionPress, {"n_future_positions": 512, "n_sink": 4,
                                                        "use_covariance": True, "use_vnorm": True,
                                                        "epsilon": 0.0}),
    }


def load_model(model_path: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(N_THREADS)
    path = pathlib.Path(model_path).resolve()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32)
    model.eval()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, tok


def bitmask_hex(positions, n_tokens: int) -> str:
    mask = bytearray((n_tokens + 7) // 8)
    for p in positions:
        mask[p // 8] |= 1 << (p % 8)
    return mask.hex()


def shim_cache_position(press):
    """transformers >= 5.3 no longer passes cache_position to the attention module; kvpress 0.5.5
    reads it only to tell prefill from decoding, and every press here prefills from empty."""
    import torch
    original_hook = press.forward_hook

    def forward_hook(module, inputs, kwargs, output):
        if "cache_position" not in kwargs:
            kwargs = {**kwargs, "cache_position": torch.arange(kwargs["hidden_states"].shape[1])}
        return original_hook(module, inputs, kwargs, output)

    press.forward_hook = forward_hook
    return press


def run_press(model, press, tokens):
    """Prefills `tokens` under `press`; returns [layer] -> {"n_kept", "heads": [...]}."""
    import torch
    from transformers import DynamicCache
    layers = {}
    original_score, original_compress = press.score, press.compress

    def score(module, *args, **kwargs):
        scores = original_score(module, *args, **kwargs)
        layers.setdefault(module.layer_idx, {})["scores"] = scores[0].detach().clone()
        return scores

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        out_keys, out_values = original_compress(module, hidden_states, keys, values, attentions,
                                                 kwargs)
        heads = []
        for h in range(keys.shape[1]):
            index = {keys[0, h, j].numpy().tobytes(): j for j in range(keys.shape[2])}
            kept = sorted(index[out_keys[0, h, i].numpy().tobytes()]
                          for i in range(out_keys.shape[2]))
            heads.append(kept)
        layers.setdefault(module.layer_idx, {})["kept"] = heads
        return out_keys, out_values

    press.score, press.compress = score, compress
    shim_cache_position(press)
    with torch.no_grad(), press(model):
        ids = torch.tensor([tokens], dtype=torch.long)
        model(input_ids=ids, past_key_values=DynamicCache(config=model.config), use_cache=True)
    result = []
    for layer in range(len(layers)):
        kept, scores = layers[layer]["kept"], layers[layer]["scores"]
        n_kept = len(kept[0])
        heads = []
        for h, positions in enumerate(kept):
            top = torch.sort(scores[h].float(), descending=True).values
            cut = [float(top[n_kept - 1])] + ([float(top[n_kept])] if n_kept < len(top) else [])
            heads.append({"kept": bitmask_hex(positions, len(tokens)), "cut": cut})
        result.append({"n_kept": n_kept, "heads": heads})
    return result


def logits_summary(logits, top_k: int = 64) -> dict:
    """What the end-to-end fixtures record of a next-token distribution: the top_k largest logits
    with their ids, the log-sum-exp over the vocabulary and the logits' range (double)."""
    import torch
    x = logits.double()
    top = torch.topk(x, top_k)
    return {"top_ids": [int(i) for i in top.indices],
            "top_logits": [float(v) for v in top.values],
            "logsumexp": float(torch.logsumexp(x, 0)), "range": float(x.max() - x.min())}


def load_for(script: str, description: str) -> tuple:
    """Parses --model (default: the cached default model, or $GLIMPSE_MODEL), loads it and returns
    (model, tokenizer, provenance naming `script`, a tools/oracle/ file name)."""
    parser = argparse.ArgumentParser(description=description)
    default_model = os.path.expanduser("~/.cache/glimpse/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--model", default=os.environ.get("GLIMPSE_MODEL", default_model))
    args = parser.parse_args()
    model, tok = load_model(args.model)
    prov = provenance(args.model)
    prov["generated_by"] = f"tools/oracle/{script}"
    prov["command"] = prov["command"].replace("make_kvpress_fixtures.py", script)
    return model, tok, prov


def provenance(model_path: str) -> dict:
    from importlib import metadata
    import torch
    import transformers
    return {
        "model": os.path.basename(model_path),
        "model_sha256": MODEL_SHA256,
        "generated_by": "tools/oracle/make_kvpress_fixtures.py",
        "command": "HF_HUB_OFFLINE=1 " + shlex.join(
            [sys.executable, "tools/oracle/make_kvpress_fixtures.py"] + sys.argv[1:]),
        "tool_versions": {"kvpress": metadata.version("kvpress"), "torch": torch.__version__,
                          "transformers": transformers.__version__,
                          "python": platform.python_version()},
        "dtype": "float32",
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(name: str, doc: dict) -> None:
    """One case / layer per line: compact, yet diffs stay readable."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, separators=(",", ":"))
    if "cases" in doc:
        head = {k: v for k, v in doc.items() if k != "cases"}
        parts = []
        for case in doc["cases"]:
            meta = {k: v for k, v in case.items() if k != "layers"}
            lines = ",\n   ".join(json.dumps(l, separators=(",", ":")) for l in case["layers"])
            parts.append(json.dumps(meta)[:-1] + ', "layers": [\n   ' + lines + "\n  ]}")
        text = json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n  ' + ",\n  ".join(parts) + "\n ]\n}"
    json.loads(text)
    (OUT_DIR / name).write_text(text + "\n", encoding="utf-8")
    print(f"wrote {(OUT_DIR / name).relative_to(REPO)} ({len(text)} bytes)", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_model = os.path.expanduser("~/.cache/glimpse/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--model", default=os.environ.get("GLIMPSE_MODEL", default_model))
    args = parser.parse_args()
    presses = import_presses()
    model, tok = load_model(args.model)
    prov = provenance(args.model)
    prompts = []
    for name, passage in PASSAGES.items():
        text = chatml(f"{passage}\n\n{QUESTIONS[name]}")
        prompts.append({"name": name, "text": text,
                        "tokens": [int(t) for t in tok.encode(text, add_special_tokens=False)]})
    write_json("prompts.json", {**prov, "prompts": prompts})
    for method, (cls, settings) in presses.items():
        for ratio in RATIOS:
            cases = []
            for p in prompts:
                press = cls(compression_ratio=ratio, **settings)
                cases.append({"prompt": p["name"], "n_tokens": len(p["tokens"]),
                              "layers": run_press(model, press, p["tokens"])})
            write_json(f"{method}_cr{ratio}.json",
                       {**prov, "method": method, "press": cls.__name__, "settings": settings,
                        "compression_ratio": ratio, "cases": cases})


if __name__ == "__main__":
    main()
