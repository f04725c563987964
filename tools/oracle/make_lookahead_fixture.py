#!/usr/bin/env python3
"""Writes a random LookaheadKV module for tests/fixtures/tiny/llama3 and its expected scores.

LookaheadKV (arXiv 2603.10899) appends n learned embeddings after the prompt and runs them with a
LoRA on every q, k, v, o, gate, up, down projection that is active on those rows only; the score of
prompt key j in (layer, kv-head h) is the mean over the lookahead rows and over h's GQA group of
their softmax attention probability on j. The softmax runs over every key a row sees (the prompt
and the lookahead rows causally before it) and the probabilities are read at the prompt keys
without renormalisation. The C++ runtime computes this with a second pass over the prompt's cache
(core/eviction/lookahead_pass.h); here it is computed independently as ONE joint forward of
transformers' own LlamaForCausalLM (fp32, eager attention, output_attentions) over
[prompt embeddings; lookahead embeddings], with the LoRA added by forward hooks to rows >= T only
(PEFT is not needed: y = W x + (alpha / r) * B (A x), PEFT's convention).

Outputs in tests/fixtures/tiny/llama3/:
  lookahead.safetensors        lookahead_embeddings [n, D] and PEFT-named lora_A [r, in] /
                               lora_B [out, r] tensors for every layer and projection, float32;
                               __metadata__ lora_alpha, r, n_lookahead, base_fingerprint
  lookahead_golden.json        {"generated_by", "command", "tool_versions", "token_ids" (the
                               prompt: golden.json's token_ids), "n_lookahead", "r", "lora_alpha",
                               "scores": [layer][kv_head][T], "lora_sensitivity": max |change| of
                               the scores when the LoRA is dropped}

The base fingerprint is Glimpse's Model::fingerprint() of the tiny model (XXH3 over Glimpse's own
canonical form, not computable here); pass it with --base-fingerprint (the C++ lookahead test
prints the model's fingerprint when they differ).

Not run by CI. Needs the oracle venv with torch (tools/oracle/setup_venv.sh --with-torch):

  $VENV/bin/python tools/oracle/make_lookahead_fixture.py --base-fingerprint HEX
"""
import argparse
import json
import os
import pathlib
import platform
import shlex
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "tests" / "fixtures" / "tiny" / "llama3"
N_LOOKAHEAD, RANK, ALPHA = 4, 2, 4.0
SEED = 8
PROJECTIONS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def lora_name(layer: int, module: str, which: str) -> str:
    return f"base_model.model.model.layers.{layer}.{module}.lora_{which}.weight"


def make_module(model) -> dict:
    """Random embeddings and LoRA factors, small values (std 0.5 embeddings, 0.25 factors)."""
    gen = torch.Generator().manual_seed(SEED)
    cfg = model.config
    tensors = {"lookahead_embeddings": torch.randn(N_LOOKAHEAD, cfg.hidden_size, generator=gen) * 0.5}
    for i, layer in enumerate(model.model.layers):
        for name in PROJECTIONS:
            linear = layer.get_submodule(name)
            tensors[lora_name(i, name, "A")] = torch.randn(RANK, linear.in_features,
                                                           generator=gen) * 0.25
            tensors[lora_name(i, name, "B")] = torch.randn(linear.out_features, RANK,
                                                           generator=gen) * 0.25
    return tensors


def lookahead_scores(model, token_ids, tensors, with_lora: bool) -> torch.Tensor:
    """[L, Hkv, T] from one joint forward with the LoRA hooked onto rows >= T."""
    T, scale = len(token_ids), ALPHA / RANK
    handles = []
    if with_lora:
        for i, layer in enumerate(model.model.layers):
            for name in PROJECTIONS:
                a, b = tensors[lora_name(i, name, "A")], tensors[lora_name(i, name, "B")]

                def hook(mod, inputs, out, a=a, b=b):
                    x = inputs[0]
                    delta = torch.zeros_like(out)
                    delta[:, T:] = scale * (x[:, T:] @ a.T) @ b.T
                    return out + delta
                handles.append(layer.get_submodule(name).register_forward_hook(hook))
    try:
        with torch.no_grad():
            prompt = model.model.embed_tokens(torch.tensor([token_ids]))
            embeds = torch.cat([prompt, tensors["lookahead_embeddings"][None]], dim=1)
            out = model(inputs_embeds=embeds, output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    cfg = model.config
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    scores = []
    for att in out.attentions:  # [1, H, T + n, T + n]
        rows = att[0, :, T:, :T].double()  # [H, n, T] lookahead queries on prompt keys
        scores.append(rows.reshape(cfg.num_key_value_heads, group, N_LOOKAHEAD, T).mean(dim=(1, 2)))
    return torch.stack(scores)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-fingerprint", required=True,
                    help="Glimpse Model::fingerprint() of tests/fixtures/tiny/llama3")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM.from_pretrained(
        str(MODEL_DIR), dtype=torch.float32, attn_implementation="eager").eval()
    token_ids = json.loads((MODEL_DIR / "golden.json").read_text())["token_ids"]
    tensors = make_module(model)
    scores = lookahead_scores(model, token_ids, tensors, with_lora=True)
    plain = lookahead_scores(model, token_ids, tensors, with_lora=False)
    sensitivity = float((scores - plain).abs().max())
    # The C++ test compares at 1e-4 relative; the LoRA must matter far more than that.
    if sensitivity < 100 * 1e-4 * float(scores.abs().max()):
        sys.exit(f"LoRA changes the scores by only {sensitivity}; the fixture would not test it")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(MODEL_DIR / "lookahead.safetensors"),
              metadata={"lora_alpha": str(ALPHA), "r": str(RANK), "n_lookahead": str(N_LOOKAHEAD),
                        "base_fingerprint": args.base_fingerprint})
    golden = {
        "generated_by": "tools/oracle/make_lookahead_fixture.py",
        "command": shlex.join(["python3", "tools/oracle/make_lookahead_fixture.py"] + sys.argv[1:]),
        "tool_versions": {"python": platform.python_version(), "torch": torch.__version__,
                          "transformers": transformers.__version__},
        "token_ids": token_ids,
        "n_lookahead": N_LOOKAHEAD, "r": RANK, "lora_alpha": ALPHA,
        "scores": scores.tolist(),
        "lora_sensitivity": sensitivity,
    }
    (MODEL_DIR / "lookahead_golden.json").write_text(json.dumps(golden) + "\n")
    print(f"wrote {MODEL_DIR}/lookahead.safetensors and lookahead_golden.json; "
          f"scores max {float(scores.max()):.4f}, LoRA sensitivity {sensitivity:.4f}")


if __name__ == "__main__":
    main()
