#!/usr/bin/env python3
"""Writes kvpress end-to-end fixtures: what a user gets from NVIDIA kvpress after eviction — the
next-token logits and the first greedy tokens — for the default model on the prompts of
make_kvpress_fixtures.py (tests/kvpress_e2e_test.cc runs Glimpse's pipeline on the same prompts
and compares).

Convention (Glimpse's, and kvpress's own pipeline.py generate_answer): the prompt's last token is
the "question". kvpress compresses the context, every prompt token but the last, in one prefill;
then the last token and each greedy token run over the compressed cache at the tokens' original
positions (position_ids = len(context), len(context) + 1, …). Generation does not stop at an
end-of-generation token: exactly N_GREEDY tokens are produced.

Presses (kvpress 0.5.5), each at compression ratios 0.5 and 0.8 of the context:
  snapkv              SnapKVPress(window_size=32, kernel_size=5)
  pyramidkv           PyramidKVPress(window_size=32, kernel_size=5, beta=20)
  streamingllm        StreamingLLMPress(n_sink=4)
  expected_attention  ExpectedAttentionPress(n_future_positions=512, n_sink=4, use_covariance=True,
                      use_vnorm=True, epsilon=0)
  adakv_snapkv        AdaKVPress(SnapKVPress(window_size=32, kernel_size=5), alpha_safeguard=0.2):
                      one top-k across the heads of a layer. kvpress keeps every key in the cache
                      and masks the pruned ones during decoding with fake keys whose attention
                      underflows to zero (kvpress/attention_patch.py, applied here).

Per case the fixture records the kept positions per (layer, kv-head) (bitmask as in
make_kvpress_fixtures.py), the logits of the last prompt token over the compressed cache (the TOP_K
largest with their ids, the log-sum-exp over the vocabulary and the logits' range) and the N_GREEDY
greedy tokens with each step's top-two logits (their gap shows near-ties where engines may
legitimately part).

Run (oracle venv with torch, transformers and kvpress: tools/oracle/setup_venv.sh --with-torch):
  $VENV/bin/python tools/oracle/make_kvpress_e2e_fixtures.py [--model PATH]
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_kvpress_fixtures as base  # noqa: E402

N_GREEDY = 16
TOP_K = 64
RATIOS = (0.5, 0.8)


def presses():
    """name -> factory(ratio) of a fresh press."""
    classes = base.import_presses()
    from kvpress.attention_patch import patch_attention_functions
    from kvpress.presses.adakv_press import AdaKVPress
    patch_attention_functions()
    snap_cls, snap_settings = classes["snapkv"]

    def plain(name):
        cls, settings = classes[name]
        return (lambda ratio: cls(compression_ratio=ratio, **settings)), settings

    table = {name: plain(name) for name in ("snapkv", "pyramidkv", "streamingllm",
                                            "expected_attention")}
    table["adakv_snapkv"] = (
        lambda ratio: AdaKVPress(snap_cls(compression_ratio=ratio, **snap_settings),
                                 alpha_safeguard=0.2),
        {"press": "SnapKVPress", **snap_settings, "alpha_safeguard": 0.2})
    return table


def kept_positions(press, model, n_context):
    """Wraps press.compress (or, for AdaKV, reads the masked indices afterwards); the returned
    collect() gives [layer][head] -> sorted kept positions after the prefill."""
    layers = {}
    inner_compress = press.compress
    ada = hasattr(press, "alpha_safeguard")

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        out_keys, out_values = inner_compress(module, hidden_states, keys, values, attentions,
                                              kwargs)
        if not ada:
            heads = []
            for h in range(keys.shape[1]):
                index = {keys[0, h, j].numpy().tobytes(): j for j in range(keys.shape[2])}
                heads.append(sorted(index[out_keys[0, h, i].numpy().tobytes()]
                                    for i in range(out_keys.shape[2])))
            layers[module.layer_idx] = heads
        return out_keys, out_values

    press.compress = compress
    base.shim_cache_position(press)

    def collect():
        if not ada:
            return [layers[l] for l in range(len(layers))]
        result = []
        for layer in model.model.layers:
            _, heads, seq = layer.self_attn.masked_key_indices
            n_heads = model.config.num_key_value_heads
            pruned = [set() for _ in range(n_heads)]
            for h, j in zip(heads.tolist(), seq.tolist()):
                pruned[h].add(j)
            result.append([[j for j in range(n_context) if j not in pruned[h]]
                           for h in range(n_heads)])
        return result

    return collect


def run_case(model, press, tokens):
    import torch
    from transformers import DynamicCache
    context, question = tokens[:-1], tokens[-1:]
    collect = kept_positions(press, model, len(context))
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        with press(model):
            model.model(input_ids=torch.tensor([context]), past_key_values=cache, use_cache=True)
        kept = collect()
        position = len(context)
        out = model(input_ids=torch.tensor([question]), past_key_values=cache,
                    position_ids=torch.tensor([[position]]), use_cache=True)
        logits = base.logits_summary(out.logits[0, -1], TOP_K)
        greedy, step_logits = [], out.logits[0, -1]
        for i in range(N_GREEDY):
            two = torch.topk(step_logits.double(), 2)
            token = int(two.indices[0])
            greedy.append({"token": token, "top2": [float(two.values[0]), float(two.values[1])]})
            out = model(input_ids=torch.tensor([[token]]), past_key_values=cache,
                        position_ids=torch.tensor([[position + 1 + i]]), use_cache=True)
            step_logits = out.logits[0, -1]
    return kept, logits, greedy


def main():
    table = presses()
    model, tok, prov = base.load_for("make_kvpress_e2e_fixtures.py", __doc__.split("\n")[0])
    prompts = json.loads((base.OUT_DIR / "prompts.json").read_text())["prompts"]
    for method, (factory, settings) in table.items():
        for ratio in RATIOS:
            cases = []
            for p in prompts:
                kept, logits, greedy = run_case(model, factory(ratio), p["tokens"])
                n_context = len(p["tokens"]) - 1
                layers = [{"n_kept": [len(h) for h in heads],
                           "heads": [{"kept": base.bitmask_hex(h, n_context)} for h in heads]}
                          for heads in kept]
                cases.append({"prompt": p["name"], "n_context": n_context, "logits": logits,
                              "greedy": greedy, "layers": layers})
                print(f"{method} cr {ratio} {p['name']}: greedy "
                      f"{tok.decode([g['token'] for g in greedy])!r}", file=sys.stderr)
            base.write_json(f"e2e_{method}_cr{ratio}.json",
                            {**prov, "method": method, "settings": settings,
                             "compression_ratio": ratio, "convention": "evict all prompt tokens "
                             "but the last; run the last and the greedy tokens at their original "
                             "positions", "n_greedy": N_GREEDY, "cases": cases})


if __name__ == "__main__":
    main()
