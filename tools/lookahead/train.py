#!/usr/bin/env python3
"""Trains a LookaheadKV module for the default model (CPU works; uses a GPU when present).

The recipe of LookaheadKV (arXiv 2603.10899), but n = 12 lookahead embeddings, not the paper's 32:
a third of the pass, about as many answers on the quality suite (docs/eviction_quality.md); LoRA
rank 8, alpha 32 on q, k, v, o, gate, up, down active on the lookahead rows only, base model
frozen; loss KL(target || normalised lookahead scores) averaged over layers and kv-heads, the
target being the model's own response's attention to the prompt, in two-turn examples the first
answer's and the second turn's alike (tools/lookahead/make_data.py makes the data,
lookahead_lib.py holds the math). AdamW, cosine learning-rate decay, one example per step.

Checkpoints (module + optimizer + step + RNG state) go to --work every --checkpoint-every steps;
rerunning the same command resumes from the last one. A fixed --seed reproduces the run.
The result is written as safetensors with the metadata the C++ loader checks
(core/eviction/lookahead_module.h) and a JSON beside it (base fingerprint, hyper-parameters,
data provenance, loss curve):

  $VENV/bin/python tools/lookahead/train.py --base-fingerprint HEX \
      --out models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors
"""
import argparse
import json
import math
import pathlib
import platform
import random
import shlex
import sys

import torch
from safetensors.torch import save_file
from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import lookahead_lib as la  # noqa: E402

# Initial lookahead embeddings: the token embeddings of a neutral answer opening, cycled to n rows.
INIT_TEXT = "<|im_start|>assistant\nBased on the text above, the answer is"


def load_examples(data: pathlib.Path) -> list:
    return [torch.load(p) for p in tqdm(la.example_paths(data), desc="loading data", unit="ex")]


def lr_at(step: int, total: int, base: float, warmup: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/glimpse/models/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--data", default=None, help="make_data.py's output directory")
    ap.add_argument("--work", default=None, help="checkpoint directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--base-fingerprint", required=True,
                    help="Glimpse Model::fingerprint() of --model (glimpse evict prints it)")
    ap.add_argument("--n-lookahead", type=int, default=12)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--checkpoint-every", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gguf = pathlib.Path(args.model)
    data = pathlib.Path(args.data or pathlib.Path.home() / ".cache/glimpse/lookahead-data" / gguf.stem)
    work = pathlib.Path(args.work or data / "train")
    work.mkdir(parents=True, exist_ok=True)

    model = la.load_model(gguf)
    examples = load_examples(data)
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    init_ids = tokenizer.encode(INIT_TEXT, add_special_tokens=False)
    module = la.LookaheadModule(model, args.n_lookahead, args.rank, args.alpha, init_ids)
    optimizer = torch.optim.AdamW(module.parameters(), lr=args.lr, weight_decay=0.0)
    total = args.epochs * len(examples)
    order = []
    rng = random.Random(args.seed)
    for _ in range(args.epochs):
        epoch = list(range(len(examples)))
        rng.shuffle(epoch)
        order += epoch
    step, losses = 0, []
    checkpoint = work / "checkpoint.pt"
    if checkpoint.exists():
        state = torch.load(checkpoint)
        if state["args"] != {k: v for k, v in vars(args).items() if k != "out"}:
            sys.exit(f"{checkpoint} was made with other arguments; remove it to start over")
        module.load_state_dict(state["module"])
        optimizer.load_state_dict(state["optimizer"])
        step, losses = state["step"], state["losses"]
        print(f"resuming at step {step}/{total}")

    bar = tqdm(total=total, initial=step, desc="training", unit="step")
    while step < total:
        ex = examples[order[step]]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total, args.lr, args.warmup)
        scores = la.lookahead_scores(model, module, ex["kv"])
        loss = la.kl_loss(ex["target"], scores)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss))
        step += 1
        recent = losses[-len(examples):]
        bar.set_postfix(loss=f"{losses[-1]:.4f}", epoch_mean=f"{sum(recent) / len(recent):.4f}")
        bar.update(1)
        if step % args.checkpoint_every == 0 or step == total:
            torch.save({"args": {k: v for k, v in vars(args).items() if k != "out"},
                        "module": module.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step, "losses": losses}, checkpoint)
    bar.close()

    # Training-set loss (first 16 examples) of the trained module and of the untrained one (B = 0: the plain model
    # reading the initial embeddings), the baseline the trained loss is read against.
    untrained = la.LookaheadModule(model, args.n_lookahead, args.rank, args.alpha, init_ids)
    with torch.no_grad():
        final, initial = [], []
        for ex in tqdm(examples[:16], desc="final loss (16 examples)", unit="ex"):
            final.append(float(la.kl_loss(ex["target"], la.lookahead_scores(model, module, ex["kv"]))))
            initial.append(float(la.kl_loss(ex["target"],
                                            la.lookahead_scores(model, untrained, ex["kv"]))))
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Stored as F16 (the C++ loader reads F32, F16 or BF16): half the size, and the scores move by
    # ~1e-6 (tests/lookahead_artifact_test.cc compares against this very file).
    save_file({k: v.half() for k, v in module.tensors().items()}, str(out), metadata={
        "lora_alpha": str(args.alpha), "r": str(args.rank), "n_lookahead": str(args.n_lookahead),
        "base_fingerprint": args.base_fingerprint})
    provenance = json.loads((data / "provenance.json").read_text())
    per_epoch = [sum(losses[i:i + len(examples)]) / len(examples)
                 for i in range(0, len(losses), len(examples))]
    doc = {
        "generated_by": "tools/lookahead/train.py",
        "command": shlex.join(["python3", "tools/lookahead/train.py"] + sys.argv[1:]),
        "base_model": gguf.name, "base_fingerprint": args.base_fingerprint,
        "hyper_parameters": {k: getattr(args, k) for k in
                             ["n_lookahead", "rank", "alpha", "epochs", "lr", "warmup", "seed"]},
        "projections": la.PROJECTIONS, "stored_dtype": "F16",
        "init_text": INIT_TEXT, "init_token_ids": init_ids,
        "loss": "mean over layers and kv-heads of KL(response attention || lookahead scores)",
        "train_loss_per_epoch": per_epoch, "final_train_loss": sum(final) / len(final),
        "untrained_train_loss": sum(initial) / len(initial),
        "data": {"command": provenance["command"], "seed": provenance["seed"],
                 "sources": provenance["sources"], "examples": len(examples)},
        "tool_versions": {"python": platform.python_version(), "torch": torch.__version__},
    }
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB); loss per epoch {per_epoch}")


if __name__ == "__main__":
    main()
