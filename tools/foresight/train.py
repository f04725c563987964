#!/usr/bin/env python3
"""Trains ForesightKV's scorer for the default model on the CPU (features, targets and loss in
foresight_lib.py).

Data: the long generations of tools/foresight/make_data.py (training texts, never the evaluation
families). Each is run once through transformers (fp32, eager attention); at every decode-time
eviction point t = prompt + k * interval (k >= 1, with at least --min-future tokens after it) and
for every (layer, kv-head), --entries entries are drawn among those selection does not force
(after the 4 sinks, before the last W), each with its features (key, value, statistics of the
last W tokens' attention) and its Golden Eviction target (the mean attention of the next
--horizon tokens' queries). Every tenth generation is held out for validation.

Training: one MLP per (layer, kv-head), all trained at once; inputs standardised per (layer,
kv-head) and feature (folded into W1 and b1 when saved); pairwise ranking loss over --pairs
random pairs per eviction point and head, ordered by target; AdamW.

Validation reports, at keeping a quarter of the drawn entries, the share of the future attention
the oracle's quarter holds that the scorer's quarter holds, beside the same for the mean window
attention (SnapKV's signal without pooling).

Output: safetensors (F32) under the names core/eviction/foresight.cc reads and a JSON beside it
(hyper-parameters, data, validation):

  python3 tools/foresight/train.py --base-fingerprint HEX [--out FILE]
"""
import argparse
import json
import pathlib
import platform
import random
import shlex
import sys

import torch
from safetensors.torch import save_file
from tqdm import tqdm

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lookahead"))
import foresight_lib as fl  # noqa: E402
import lookahead_lib as la  # noqa: E402

REPO = HERE.parents[1]
SINKS = 4


def eviction_points(n: int, prompt: int, interval: int, min_future: int) -> list:
    points, t = [], prompt + interval
    while t + min_future <= n:
        points.append(t)
        t += interval
    return points


def example_blocks(model, ex: dict, args, rng: random.Random) -> tuple:
    """Features [L, Hkv, points, entries, F] and targets [L, Hkv, points, entries] of one trace."""
    ids, prompt = ex["ids"], ex["prompt_len"]
    points = eviction_points(len(ids), prompt, args.interval, args.min_future)
    if not points:
        return None, None
    attentions, cache = fl.full_pass(model, ids)
    hkv = model.config.num_key_value_heads
    group = model.config.num_attention_heads // hkv
    xs, ys = [], []
    for layer, att in enumerate(attentions):
        keys, values = cache.layers[layer].keys[0], cache.layers[layer].values[0]
        x_layer, y_layer = [], []
        for h in range(hkv):
            grp = att[0, h * group:(h + 1) * group]
            x_head, y_head = [], []
            for t in points:
                cand = torch.tensor(sorted(rng.sample(range(SINKS, t - args.window),
                                                      args.entries)))
                probs = fl.window_probs_from_attention(grp, t, args.window)
                feats = fl.features(keys[h, :t], values[h, :t], probs)
                target = fl.future_importance(grp, t, args.horizon)
                x_head.append(feats[cand].half())
                y_head.append(target[cand])
            x_layer.append(torch.stack(x_head))
            y_layer.append(torch.stack(y_head))
        xs.append(torch.stack(x_layer))
        ys.append(torch.stack(y_layer))
    return torch.stack(xs), torch.stack(ys)


def load_blocks(model, traces: list, args) -> tuple:
    rng = random.Random(args.seed)
    xs, ys = [], []
    for ex in tqdm(traces, desc="features", unit="trace"):
        x, y = example_blocks(model, ex, args, rng)
        if x is not None:
            xs.append(x)
            ys.append(y)
    return torch.cat(xs, 2), torch.cat(ys, 2)


class Scorers(torch.nn.Module):
    """Every (layer, kv-head)'s MLP, on standardised inputs."""

    def __init__(self, n_layers: int, hkv: int, n_features: int, mean: torch.Tensor,
                 std: torch.Tensor):
        super().__init__()
        shape = (n_layers, hkv)
        self.w1 = torch.nn.Parameter(torch.randn(*shape, fl.HIDDEN_UNITS, n_features) /
                                     n_features ** 0.5)
        self.b1 = torch.nn.Parameter(torch.zeros(*shape, fl.HIDDEN_UNITS))
        self.w2 = torch.nn.Parameter(torch.randn(*shape, fl.HIDDEN_UNITS) / fl.HIDDEN_UNITS ** 0.5)
        self.b2 = torch.nn.Parameter(torch.zeros(*shape))
        self.register_buffer("mean", mean)  # [L, Hkv, F]
        self.register_buffer("std", std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [L, Hkv, B, N, F] -> scores [L, Hkv, B, N]."""
        z = (x - self.mean[:, :, None, None]) / self.std[:, :, None, None]
        return fl.mlp(z, self.w1[:, :, None], self.b1[:, :, None], self.w2[:, :, None],
                      self.b2[:, :, None])

    def tensors(self, window: int) -> dict:
        """Weights with the standardisation folded in, under foresight.cc's names."""
        w1 = self.w1 / self.std[:, :, None, :]
        b1 = self.b1 - (w1 * self.mean[:, :, None, :]).sum(-1)
        return {"foresight.w1": w1.detach().contiguous(), "foresight.b1": b1.detach().contiguous(),
                "foresight.w2": self.w2.detach().contiguous(),
                "foresight.b2": self.b2.detach().contiguous(),
                "foresight.window": torch.tensor([float(window)])}


def random_pairs(y: torch.Tensor, n: int, gen: torch.Generator) -> tuple:
    """[.., n] index pairs (a, b) per block of y [L, Hkv, B, N] with y[a] >= y[b]."""
    a = torch.randint(0, y.shape[-1], (*y.shape[:-1], n), generator=gen)
    b = torch.randint(0, y.shape[-1], (*y.shape[:-1], n), generator=gen)
    ya, yb = y.gather(-1, a), y.gather(-1, b)
    swap = ya < yb
    return torch.where(swap, b, a), torch.where(swap, a, b), (ya != yb).float()


def kept_share(scores: torch.Tensor, y: torch.Tensor, keep: float = 0.25) -> float:
    """Share of the oracle's kept future attention that the top `keep` of `scores` holds."""
    k = max(1, int(y.shape[-1] * keep))
    ours = y.gather(-1, scores.topk(k, -1).indices).sum(-1)
    best = y.topk(k, -1).values.sum(-1)
    return float((ours / best.clamp_min(1e-12)).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/glimpse/models/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--data", default=None, help="make_data.py's directory")
    ap.add_argument("--base-fingerprint", required=True,
                    help="Glimpse's fingerprint of the model (glimpse generate prints it)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--interval", type=int, default=32)
    ap.add_argument("--horizon", type=int, default=128)
    ap.add_argument("--min-future", type=int, default=32)
    ap.add_argument("--entries", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gguf = pathlib.Path(args.model)
    data = pathlib.Path(args.data or pathlib.Path.home() /
                        f".cache/glimpse/foresight-data/{gguf.stem}")
    traces = [json.loads(line) for line in (data / "traces.jsonl").open()]
    held = [t for i, t in enumerate(traces) if i % 10 == 9]
    train = [t for i, t in enumerate(traces) if i % 10 != 9]
    model = la.load_model(gguf)
    x, y = load_blocks(model, train, args)
    vx, vy = load_blocks(model, held, args)
    n_layers, hkv, _, _, n_features = x.shape
    flat = x.float().reshape(n_layers, hkv, -1, n_features)
    scorers = Scorers(n_layers, hkv, n_features, flat.mean(2), flat.std(2).clamp_min(1e-4))
    del flat
    opt = torch.optim.AdamW(scorers.parameters(), lr=args.lr, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(args.seed)
    n_points = x.shape[2]
    baseline = kept_share(vx[..., 2 * model.config.head_dim].float(), vy)  # stat 0 of head 0
    with torch.no_grad():
        before = kept_share(scorers(vx.float()), vy)
    losses = []
    for step in tqdm(range(args.steps), desc="train", unit="step"):
        idx = torch.randint(0, n_points, (args.batch,), generator=gen)
        xb, yb = x[:, :, idx].float(), y[:, :, idx]
        a, b, valid = random_pairs(yb, args.pairs, gen)
        s = scorers(xb)
        margin = s.gather(-1, a) - s.gather(-1, b)
        loss = (torch.nn.functional.softplus(-margin) * valid).sum() / valid.sum().clamp_min(1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        after = kept_share(scorers(vx.float()), vy)
    out = pathlib.Path(args.out or REPO / f"models/lookahead/{gguf.stem}.foresightkv.safetensors")
    save_file(scorers.tensors(args.window), str(out))
    report = {
        "generated_by": "tools/foresight/train.py",
        "command": shlex.join([sys.executable] + sys.argv),
        "method": "foresightkv",
        "base_model": gguf.name,
        "base_fingerprint": args.base_fingerprint,
        "hyper_parameters": {k: getattr(args, k) for k in
                             ("window", "interval", "horizon", "min_future", "entries", "pairs",
                              "steps", "batch", "lr", "seed")},
        "data": {"traces": str(data / "traces.jsonl"), "train": len(train), "held_out": len(held),
                 "eviction_points_train": int(n_points), "eviction_points_held_out":
                 int(vx.shape[2])},
        "objective": "pairwise ranking (softplus) against Golden Eviction targets: the mean "
                     "attention of the next `horizon` tokens' queries",
        "validation_kept_share_at_25pct": {"untrained": before, "trained": after,
                                           "mean_window_attention": baseline},
        "loss": {"first_100": sum(losses[:100]) / max(1, len(losses[:100])),
                 "last_100": sum(losses[-100:]) / max(1, len(losses[-100:]))},
        "python": platform.python_version(), "torch": torch.__version__,
    }
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["validation_kept_share_at_25pct"]), file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
