#!/usr/bin/env python3
"""Writes kvpress decode-time eviction fixtures: the greedy tokens and logits a user gets from
NVIDIA kvpress's DecodingPress, which evicts during generation, for the default model on the
prompts of make_kvpress_fixtures.py (tests/kvpress_decode_test.cc runs Glimpse's decode-time
eviction, core/eviction/decode_eviction.h, on the same prompts and compares).

Convention (both engines): the whole prompt is prefilled without eviction; greedy tokens are fed
one at a time at their original positions; after every `interval`-th fed token, once the cache
holds more than `target` entries per head, each layer's cache is cut to `target` entries
(DecodingPress(compression_interval=interval, target_size=target), evicting after the token's
attention ran). Generation does not stop at an end-of-generation token: exactly N_GREEDY tokens.

Press (kvpress 0.5.5): StreamingLLMPress(n_sink=4) under DecodingPress: the 4 first entries and
the most recent ones. Its choice depends on positions only, so the two engines must keep the same
entries exactly and any difference in tokens is a difference in what runs over the cut cache.
(kvpress's window presses rotate every buffered query with the current token's RoPE angle during
decoding, so SnapKV's decode-time scores are not comparable.)

One correction to kvpress 0.5.5: ScorerPress.compress gathers the kept entries in the order
torch.topk returns them (by score, ties in no particular order), so after the first eviction the
cache is no longer in position order, and the second eviction's StreamingLLM, which takes entry
indices for time ("the first n_sink", "the oldest after them"), cuts arbitrary entries. Here the
kept indices are sorted before the gather (compress_in_order), which keeps what was chosen and
the cache in position order, as Glimpse's KvCache::Retain does.

Per case the fixture records each greedy token with the step's top-two logits (their gap shows
near-ties where engines may legitimately part) and, for the step after the last eviction, the
TOP_K largest logits with their ids, the log-sum-exp over the vocabulary and the logits' range.

Run (oracle venv with torch, transformers and kvpress: tools/oracle/setup_venv.sh --with-torch):
  $VENV/bin/python tools/oracle/make_kvpress_decode_fixtures.py [--model PATH]
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_kvpress_fixtures as base  # noqa: E402

N_GREEDY = 64
TOP_K = 64
# (interval, target): evictions after fed tokens 16, 32, 48, 64 to 128 entries; every 8 to 64.
SETTINGS = ((16, 128), (8, 64))


def compress_in_order(press):
    """ScorerPress.compress with the kept indices in position order (see the module doc)."""
    from kvpress.utils import compute_n_kept

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        if press.compression_ratio == 0:
            return keys, values
        scores = press.score(module, hidden_states, keys, values, attentions, kwargs)
        n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
        indices = scores.topk(n_kept, dim=-1).indices.sort(dim=-1).values
        indices = indices.unsqueeze(-1).expand(-1, -1, -1, module.head_dim)
        return keys.gather(2, indices).contiguous(), values.gather(2, indices).contiguous()

    press.compress = compress
    return press


def run_case(model, press, tokens, interval):
    """Greedy decoding under `press`; returns (greedy steps, logits after the last eviction)."""
    import torch
    from transformers import DynamicCache
    state = {"position": None}  # None while prefilling
    original_hook = press.forward_hook

    def forward_hook(module, inputs, kwargs, output):
        # transformers >= 5.3 no longer passes cache_position; kvpress reads it to tell prefill
        # (positions 0 … q_len − 1) from decoding.
        n = kwargs["hidden_states"].shape[1]
        first = 0 if state["position"] is None else state["position"]
        kwargs = {**kwargs, "cache_position": torch.arange(first, first + n)}
        return original_hook(module, inputs, kwargs, output)

    press.forward_hook = forward_hook
    cache = DynamicCache(config=model.config)
    greedy, last_logits = [], None
    with torch.no_grad(), press(model):
        out = model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True)
        logits = out.logits[0, -1]
        for i in range(N_GREEDY):
            two = torch.topk(logits.double(), 2)
            token = int(two.indices[0])
            greedy.append({"token": token, "top2": [float(two.values[0]), float(two.values[1])]})
            if i == N_GREEDY - 1:
                break
            state["position"] = len(tokens) + i
            out = model(input_ids=torch.tensor([[token]]), past_key_values=cache,
                        position_ids=torch.tensor([[len(tokens) + i]]), use_cache=True)
            logits = out.logits[0, -1]
            if (i + 1) % interval == 0:
                last_logits = {"after_fed": i + 1, **base.logits_summary(logits, TOP_K)}
        kept = [int(cache.layers[l].keys.shape[2]) for l in range(len(cache.layers))]
    return greedy, last_logits, kept


def main():
    base.import_presses()
    from kvpress.presses.decoding_press import DecodingPress
    from kvpress.presses.streaming_llm_press import StreamingLLMPress
    model, tok, prov = base.load_for("make_kvpress_decode_fixtures.py", __doc__.split("\n")[0])
    prompts = json.loads((base.OUT_DIR / "prompts.json").read_text())["prompts"]
    for interval, target in SETTINGS:
        cases = []
        for p in prompts:
            press = DecodingPress(base_press=compress_in_order(StreamingLLMPress(n_sink=4)),
                                  compression_interval=interval, target_size=target,
                                  hidden_states_buffer_size=0)
            greedy, logits, kept = run_case(model, press, p["tokens"], interval)
            cases.append({"prompt": p["name"], "n_prompt": len(p["tokens"]), "greedy": greedy,
                          "logits": logits, "final_entries": kept[0]})
            print(f"streamingllm every {interval} to {target} {p['name']}: "
                  f"{tok.decode([g['token'] for g in greedy])!r}", file=sys.stderr)
        doc = {**prov, "method": "streamingllm", "settings": {"n_sink": 4},
               "interval": interval, "target": target, "n_greedy": N_GREEDY,
               "correction": "kept indices sorted before the gather (kvpress gathers them in "
                             "topk order, which breaks index-based presses from the second "
                             "eviction on)",
               "convention": "prefill the whole prompt; feed greedy tokens at their original "
                             "positions; after every interval-th fed token cut every layer to "
                             "target entries per head", "cases": cases}
        name = f"decode_streamingllm_i{interval}_t{target}.json"
        text = json.dumps(doc, indent=1)
        (base.OUT_DIR / name).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {name} ({len(text)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
