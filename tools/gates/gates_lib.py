"""The learned eviction gates in PyTorch: the three architectures Glimpse's C++ scorers read, their
inputs and training targets, and the losses they are trained with.

Every gate reads x = a layer's attention input (hidden_states after input_layernorm) of each
prompt token and scores it per kv-head; the formulas are those of core/eviction/kvzip_gate.cc,
trimkv_gate.cc and retention_global.cc, so the C++ test of a trained file
(tests/gate_artifact_test.cc) compares two implementations of one function:

  kvzip_gate        Fast KVzip's low-rank sink-attention gate, score in (0, 1];
  trimkv_gate       TRIM-KV's retention gate: log beta_i * (T + 1 - pos_i), <= 0;
  retention_global  one projection shared by all layers plus a per-(layer, head) bias: a logit
                    comparable across layers, for one global top-k.

Targets, per (layer, kv-head) and prompt key:
  kvzip   KVzip's importance (arXiv 2505.23416): after the prompt, the model is asked to repeat it
          and is teacher-forced through the repetition; a key's score is the largest attention
          any repetition row of the head's GQA group gives it. Fast KVzip distils exactly this
          score with a per-token binary cross-entropy ("cnt" loss of its optim.py).
  response  the mean attention of the model's own greedy answer to each key, normalised to sum 1
          (LookaheadKV's target, tools/lookahead/lookahead_lib.py).
"""
import math

import torch

from lookahead_lib import cache_of

RMS_EPS = 1e-6
REPEAT_TEXT = "user\nRepeat the previous context exactly.<|im_end|>\n<|im_start|>assistant\n"


def attention_inputs(model, token_ids: list) -> torch.Tensor:
    """[L, T, D]: every layer's input_layernorm output for the prompt (no gradients)."""
    captured = []
    handles = [layer.input_layernorm.register_forward_hook(
        lambda mod, inputs, out: captured.append(out[0].detach()))
        for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([token_ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return torch.stack(captured)


def kvzip_targets(model, kv: list, token_ids: list, repeat_ids: list) -> torch.Tensor:
    """[L, Hkv, T] KVzip scores: max over the repeat rows and the GQA group of their attention to
    each prompt key. The prompt's cache `kv` is reused; the rows are the repeat instruction and
    the prompt itself again, at positions after it."""
    T = kv[0][0].shape[2]
    rows = repeat_ids + token_ids
    with torch.no_grad():
        out = model(input_ids=torch.tensor([rows]), past_key_values=cache_of(kv),
                    position_ids=torch.arange(T, T + len(rows))[None], output_attentions=True,
                    use_cache=True)
    hkv = model.config.num_key_value_heads
    scores = []
    for att in out.attentions:  # [1, H, rows, T + rows]
        a = att[0, :, :, :T]
        scores.append(a.reshape(hkv, a.shape[0] // hkv, a.shape[1], T).amax(dim=(1, 2)))
    return torch.stack(scores)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * weight


class KvzipGate(torch.nn.Module):
    """One layer's gate (Fast KVzip Weight): dg = 16, S = 16 sinks by default."""

    def __init__(self, hidden: int, hkv: int, group: int, dg: int = 16, sinks: int = 16):
        super().__init__()
        self.hkv, self.group, self.dg = hkv, group, dg
        self.q_proj = torch.nn.Linear(hidden, hkv * group * dg, bias=True)
        self.k_proj = torch.nn.Linear(hidden, hkv * dg, bias=False)
        self.q_norm = torch.nn.Parameter(torch.ones(dg))
        self.k_norm = torch.nn.Parameter(torch.ones(dg))
        self.k_base = torch.nn.Parameter(torch.zeros(hkv, 1, sinks, dg))
        self.b = torch.nn.Parameter(torch.zeros(hkv, 1, group))

    def forward(self, x: torch.Tensor, positions=None) -> torch.Tensor:
        """x [T, D] -> [Hkv, T] in (0, 1]."""
        T = x.shape[0]
        q = _rms_norm(self.q_proj(x).view(T, self.hkv, self.group, self.dg), self.q_norm)
        k = _rms_norm(self.k_proj(x).view(T, self.hkv, self.dg), self.k_norm)
        scale = 1.0 / math.sqrt(self.dg)
        logit = torch.einsum("thd,thgd->htg", k, q) * scale + self.b[:, 0, None, :]
        base = torch.einsum("hsd,thgd->htsg", self.k_base[:, 0], q) * scale  # [Hkv, T, S, G]
        score = 1.0 / (1.0 + torch.exp(base - logit[:, :, None, :]).sum(dim=2))
        return score.mean(dim=-1)

    def tensors(self, layer: int) -> dict:
        p = f"layers.{layer}."
        return {p + "q_proj.weight": self.q_proj.weight, p + "q_proj.bias": self.q_proj.bias,
                p + "k_proj.weight": self.k_proj.weight, p + "q_norm.weight": self.q_norm,
                p + "k_norm.weight": self.k_norm, p + "k_base": self.k_base, p + "b": self.b}


class TrimKvGate(torch.nn.Module):
    """One layer's TRIM-KV retention gate; bias initialised to 10 (beta ~ 1) as the reference."""

    def __init__(self, hidden: int, hkv: int, inner: int = 128):
        super().__init__()
        self.linear1 = torch.nn.Linear(hidden, inner, bias=True)
        self.linear2 = torch.nn.Linear(inner, hkv, bias=False)
        self.bias = torch.nn.Parameter(torch.full((hkv,), 10.0))

    def log_beta(self, x: torch.Tensor) -> torch.Tensor:
        """[T, D] -> [Hkv, T] log retention."""
        return torch.nn.functional.logsigmoid(
            self.linear2(torch.nn.functional.silu(self.linear1(x))) + self.bias).T

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """[Hkv, T]: log beta_i * (T + 1 - pos_i), the C++ scorer's t = T + 1."""
        age = (x.shape[0] + 1 - positions).to(x.dtype)
        return self.log_beta(x) * age[None, :]

    def tensors(self, layer: int) -> dict:
        p = f"model.layers.{layer}.self_attn.retention_gate."
        return {p + "linear1.weight": self.linear1.weight, p + "linear1.bias": self.linear1.bias,
                p + "linear2.weight": self.linear2.weight, p + "bias": self.bias}


class RetentionGlobal(torch.nn.Module):
    """logit[l, h, t] = W[h] . x_t^(l) + c[l, h], W shared by all layers."""

    def __init__(self, hidden: int, hkv: int, n_layers: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(hkv, hidden))
        self.layer_bias = torch.nn.Parameter(torch.zeros(n_layers, hkv))

    def forward(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """x [T, D] of `layer` -> [Hkv, T]."""
        return (x @ self.weight.T + self.layer_bias[layer]).T

    def tensors(self) -> dict:
        return {"retention.weight": self.weight, "retention.layer_bias": self.layer_bias}


def bce_loss(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Fast KVzip's "cnt" loss for one layer: BCE per token, mean over tokens, sum over heads."""
    s = scores.clamp(1e-6, 1 - 1e-6)
    return torch.nn.functional.binary_cross_entropy(s, target.clamp(0, 1), reduction="none") \
        .mean(-1).sum()


def softmax_kl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """KL(target || softmax(logits)) over the last axis, mean over the rest; target sums to 1."""
    t = target.clamp_min(1e-12)
    return (t * (t.log() - torch.log_softmax(logits, dim=-1))).sum(-1).mean()
