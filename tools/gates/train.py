#!/usr/bin/env python3
"""Trains one learned eviction gate for the default model on the CPU: kvzip_gate, trimkv_gate or
retention_global (architectures and losses in gates_lib.py).

Data: LookaheadKV's training examples (tools/lookahead/make_data.py: licences, Debian copyright
files, Python sources and synthetic records; never the evaluation families), from which this tool
derives and caches per example the attention inputs of every layer and, for kvzip_gate, KVzip's
scores (--features, default ~/.cache/glimpse/gate-data/<model stem>/). Every tenth example is held
out for validation.

Objectives:
  kvzip_gate        Fast KVzip's recipe: BCE against KVzip's scores, tokens pooled across examples
                    in batches of 1000, SGD with momentum 0.9, its step schedule.
  trimkv_gate       TRIM-KV's reference trains the gate end to end through the frozen model (LM
                    distillation with retention-weighted attention and a capacity loss); on a CPU
                    we train its score instead: KL(response attention || softmax(log beta * age))
                    per (layer, kv-head), so beta ranks keys as the answer will read them.
  retention_global  KL(response attention / (L * Hkv) || softmax over every (layer, head, token)):
                    one distribution over the whole cache, so logits compare across layers.
Both KL gates use AdamW, one example per step. The result is safetensors (F16) under the names the
C++ scorer reads, and a JSON beside it (hyper-parameters, data provenance, validation losses and
the share of the answer's attention kept at 20 % before and after training):

  $VENV/bin/python tools/gates/train.py --method kvzip_gate --base-fingerprint HEX
"""
import argparse
import json
import math
import pathlib
import platform
import random
import re
import shlex
import sys

import torch
from safetensors.torch import save_file
from tqdm import tqdm

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lookahead"))
import gates_lib as gl  # noqa: E402
import lookahead_lib as la  # noqa: E402

REPO = HERE.parents[1]
METHODS = ["kvzip_gate", "trimkv_gate", "retention_global"]


def load_features(model, tokenizer, data: pathlib.Path, cache: pathlib.Path, kvzip: bool,
                  count: int) -> list:
    """Per example (the first `count`): prompt ids, hidden [L, T, D] (fp16), response target
    [L, Hkv, T] and, with `kvzip`, KVzip's scores [L, Hkv, T]; derived once and cached."""
    paths = la.example_paths(data, count)
    cache.mkdir(parents=True, exist_ok=True)
    repeat_ids = tokenizer.encode(gl.REPEAT_TEXT, add_special_tokens=False)
    out = []
    for path in tqdm(paths, desc="features", unit="ex"):
        ex = torch.load(path)
        feat_path = cache / path.name
        feat = torch.load(feat_path) if feat_path.exists() else {}
        if "hidden" not in feat:
            feat["hidden"] = gl.attention_inputs(model, ex["prompt_ids"]).half()
            torch.save(feat, feat_path)
        if kvzip and "kvzip" not in feat:
            kv = [(k.float(), v.float()) for k, v in ex["kv"]]
            feat["kvzip"] = gl.kvzip_targets(model, kv, ex["prompt_ids"], repeat_ids)
            torch.save(feat, feat_path)
        out.append({"hidden": feat["hidden"], "target": ex["target"].float(),
                    "kvzip": feat.get("kvzip"), "kind": ex["kind"]})
    return out


class Gates(torch.nn.Module):
    """The method's modules for every layer, scoring [L, Hkv, T] from hidden [L, T, D]."""

    def __init__(self, method: str, n_layers: int, hidden: int, hkv: int, group: int, args):
        super().__init__()
        self.method = method
        if method == "kvzip_gate":
            self.layers = torch.nn.ModuleList(
                gl.KvzipGate(hidden, hkv, group, args.dg, args.sinks) for _ in range(n_layers))
        elif method == "trimkv_gate":
            self.layers = torch.nn.ModuleList(
                gl.TrimKvGate(hidden, hkv, args.inner) for _ in range(n_layers))
        else:
            self.shared = gl.RetentionGlobal(hidden, hkv, n_layers)
        self.n_layers = n_layers

    def forward(self, hidden: torch.Tensor, layer: int, positions: torch.Tensor) -> torch.Tensor:
        if self.method == "retention_global":
            return self.shared(hidden, layer)
        return self.layers[layer](hidden, positions)

    def score_all(self, hidden: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(hidden.shape[1])
        return torch.stack([self(hidden[l].float(), l, positions) for l in range(self.n_layers)])

    def tensors(self) -> dict:
        """The parameters under the names the C++ scorer reads."""
        if self.method == "retention_global":
            return self.shared.tensors()
        out = {}
        for l, layer in enumerate(self.layers):
            out.update(layer.tensors(l))
        return out

    def load_tensors(self, tensors: dict) -> None:
        with torch.no_grad():
            for name, param in self.tensors().items():
                param.copy_(tensors[name])


def sequence_loss(gates: Gates, ex: dict) -> torch.Tensor:
    scores = gates.score_all(ex["hidden"])  # [L, Hkv, T]
    if gates.method == "retention_global":
        n = scores.shape[0] * scores.shape[1]
        return gl.softmax_kl(scores.reshape(1, -1), (ex["target"] / n).reshape(1, -1))
    if gates.method == "trimkv_gate":
        return gl.softmax_kl(scores, ex["target"])
    return sum(gl.bce_loss(scores[l], ex["kvzip"][l]) for l in range(scores.shape[0]))


def kept_share(scores: torch.Tensor, target: torch.Tensor, ratio: float = 0.2) -> float:
    """Mean over (layer, kv-head) of the response attention on the top `ratio` keys by score."""
    k = max(1, math.ceil(ratio * scores.shape[-1]))
    top = scores.topk(k, dim=-1).indices
    return float(target.gather(-1, top).sum(-1).mean())


def evaluate(gates: Gates, examples: list) -> dict:
    with torch.no_grad():
        losses = [float(sequence_loss(gates, ex)) for ex in examples]
        kept = [kept_share(gates.score_all(ex["hidden"]), ex["target"]) for ex in examples]
        best = [kept_share(ex["target"], ex["target"]) for ex in examples]
    return {"loss": sum(losses) / len(losses), "answer_attention_kept_at_20pct":
            sum(kept) / len(kept), "oracle_kept_at_20pct": sum(best) / len(best)}


def train_kvzip(gates: Gates, train: list, args) -> list:
    """Fast KVzip's optimiser: SGD(momentum 0.9) over batches of tokens pooled across examples,
    lr scaled 0.01*step for the first 1 %, 1 until half-way, 0.5 until 3/4, then 0.25."""
    hidden = torch.cat([ex["hidden"] for ex in train], dim=1)  # [L, N, D] fp16
    target = torch.cat([ex["kvzip"] for ex in train], dim=2)   # [L, Hkv, N]
    opt = torch.optim.SGD(gates.parameters(), lr=args.lr, momentum=0.9)
    n = hidden.shape[1]
    losses, order, cursor = [], torch.randperm(n), 0
    for step in tqdm(range(args.steps), desc="training", unit="step"):
        if cursor + args.batch > n:
            order, cursor = torch.randperm(n), 0
        idx = order[cursor:cursor + args.batch]
        cursor += args.batch
        x = hidden[:, idx].float()
        y = target[:, :, idx]
        frac = step / args.steps
        scale = 0.01 * step if step < 0.01 * args.steps else \
            1.0 if frac < 0.5 else 0.5 if frac < 0.75 else 0.25
        for g in opt.param_groups:
            g["lr"] = args.lr * scale
        loss = sum(gl.bce_loss(gates(x[l], l, None), y[l]) for l in range(gates.n_layers))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def train_sequences(gates: Gates, train: list, args) -> list:
    opt = torch.optim.AdamW(gates.parameters(), lr=args.lr, weight_decay=0.0)
    rng = random.Random(args.seed)
    order = []
    while len(order) < args.steps:
        epoch = list(range(len(train)))
        rng.shuffle(epoch)
        order += epoch
    losses = []
    bar = tqdm(range(args.steps), desc="training", unit="step")
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        loss = sequence_loss(gates, train[order[step]])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gates.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    return losses


def objective(method: str) -> str:
    """The method's paragraph of "Objectives" in this file's docstring, on one line."""
    text = __doc__.split("Objectives:\n")[1].split("\nBoth KL")[0]
    paragraphs = re.split(r"\n  (?=\S)", "\n" + text)
    mine = next(p for p in paragraphs if p.strip().startswith(method + " "))
    return " ".join(mine.split())


DEFAULTS = {  # steps, lr
    "kvzip_gate": (2000, 0.2),
    "trimkv_gate": (800, 1e-3),
    "retention_global": (800, 1e-2),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", required=True, choices=METHODS)
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/glimpse/models/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--data", default=None, help="make_data.py's output directory")
    ap.add_argument("--features", default=None, help="cache of derived inputs and targets")
    ap.add_argument("--examples", type=int, default=136,
                    help="the first N of make_data.py's examples (the committed gates: the 136 "
                         "made before its roster family)")
    ap.add_argument("--out", default=None,
                    help="default: models/lookahead/<model stem>.<method>.safetensors")
    ap.add_argument("--base-fingerprint", required=True,
                    help="Glimpse Model::fingerprint() of --model (glimpse evict prints it)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--batch", type=int, default=1000, help="kvzip_gate: tokens per step")
    ap.add_argument("--dg", type=int, default=16, help="kvzip_gate: gate head dim")
    ap.add_argument("--sinks", type=int, default=16, help="kvzip_gate: learned sink keys")
    ap.add_argument("--inner", type=int, default=128, help="trimkv_gate: hidden width")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    args.steps = args.steps or DEFAULTS[args.method][0]
    args.lr = args.lr or DEFAULTS[args.method][1]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gguf = pathlib.Path(args.model)
    home = pathlib.Path.home() / ".cache/glimpse"
    data = pathlib.Path(args.data or home / "lookahead-data" / gguf.stem)
    cache = pathlib.Path(args.features or home / "gate-data" / gguf.stem)
    out = pathlib.Path(args.out or
                       REPO / "models/lookahead" / f"{gguf.stem}.{args.method}.safetensors")

    model = la.load_model(gguf)
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    examples = load_features(model, tokenizer, data, cache, args.method == "kvzip_gate",
                             args.examples)
    val = examples[::10]
    train = [ex for i, ex in enumerate(examples) if i % 10 != 0]
    cfg = model.config
    gates = Gates(args.method, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads,
                  cfg.num_attention_heads // cfg.num_key_value_heads, args)
    before = evaluate(gates, val)
    losses = (train_kvzip if args.method == "kvzip_gate" else train_sequences)(gates, train, args)
    after = evaluate(gates, val)
    print(f"validation before {before}\nvalidation after  {after}")

    out.parent.mkdir(parents=True, exist_ok=True)
    # F16 halves the file; tests/gate_artifact_test.cc compares the runtime against this file.
    save_file({k: v.detach().half().contiguous() for k, v in gates.tensors().items()}, str(out),
              metadata={"method": args.method, "base_fingerprint": args.base_fingerprint})
    provenance = json.loads((data / "provenance.json").read_text())
    chunk = max(1, len(losses) // 10)
    doc = {
        "generated_by": "tools/gates/train.py",
        "command": shlex.join(["python3", "tools/gates/train.py"] + sys.argv[1:]),
        "method": args.method, "base_model": gguf.name, "base_fingerprint": args.base_fingerprint,
        "hyper_parameters": {k: getattr(args, k) for k in
                             ["steps", "lr", "batch", "dg", "sinks", "inner", "seed"]},
        "objective": objective(args.method),
        "stored_dtype": "F16",
        "train_loss_per_tenth": [sum(losses[i:i + chunk]) / len(losses[i:i + chunk])
                                 for i in range(0, len(losses), chunk)],
        "validation_untrained": before, "validation_trained": after,
        "data": {"command": provenance["command"], "seed": provenance["seed"],
                 "sources": provenance["sources"], "examples": len(examples),
                 "validation_examples": len(val)},
        "tool_versions": {"python": platform.python_version(), "torch": torch.__version__},
    }
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
