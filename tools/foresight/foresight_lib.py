"""ForesightKV for Glimpse in PyTorch: the scorer's features and MLP (what core/eviction/
foresight.cc computes), its Golden Eviction targets and its pairwise ranking loss.

Scorer (ForesightKV, arXiv 2602.03203: a per-head MLP over each KV entry's key, value and attention
statistics, 2d + 8G -> 16 -> GELU -> 1). For a (layer, kv-head) holding T entries and the W most
recent queries of its GQA group (G query heads), probs[g, i, j] is query i's softmax attention to
entry j over all T entries (1/sqrt(d) scale, fp32; query i is token T - W + i of the window, causal
inside it: entries after it get 0; a query row that is absent is all zeros). Per entry j and query
head g, eight statistics:
    mean_i p, max_i p, p of the last query, mean of the last 8 queries' p,
    and the log (natural, of x + 1e-6) of each of the four,
so the features of entry j are [key_j (d), value_j (d), stats (G x 8, head-major)], keys post-RoPE
in transformers' half-rotation layout (dims i and i + d/2 rotate together; Glimpse's runtime
reorders an interleaved-RoPE model's keys to it). The MLP is
    score_j = w2 . gelu(W1 x_j + b1) + b2     W1 [16, 2d + 8G], b1 [16], w2 [16], b2 [1]
per (layer, kv-head), exact (erf) GELU; higher = keep.

Golden Eviction targets: for an eviction after token t - 1 (the cache holds positions < t), entry
j's future importance is the mean, over the next F tokens' queries and the group's query heads, of
their attention to j in the full-cache forward pass (what a cache that keeps j would give it). The
entries an oracle keeps are those with the highest future importance; the scorer is trained to
rank entries in that order with a pairwise ranking loss (softplus of the score difference of a pair
in the wrong order, pairs drawn within one eviction of one head).

Tensors (.safetensors, F32), L layers, Hkv kv-heads:
    foresight.w1 [L, Hkv, 16, F]   foresight.b1 [L, Hkv, 16]
    foresight.w2 [L, Hkv, 16]      foresight.b2 [L, Hkv]
    foresight.window [1]           W, the queries the statistics read
Input normalisation learned on the training data is folded into w1 and b1 before saving.
"""
import math

import torch

HIDDEN_UNITS = 16
N_STATS = 8
RECENT = 8
EPS = 1e-6


def full_pass(model, token_ids: list) -> tuple:
    """One forward pass over token_ids: (attention probabilities per layer [1, H, T, T], the
    DynamicCache holding post-RoPE keys and values)."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([token_ids]), past_key_values=cache, use_cache=True,
                    output_attentions=True)
    return out.attentions, cache


def window_probs_from_attention(att: torch.Tensor, t: int, window: int) -> torch.Tensor:
    """[G, W, t]: the attention rows of tokens t - W .. t - 1 over entries < t, from a full-cache
    forward pass's attention probabilities att [G, T_all, T_all] (row r attends to j <= r only, so
    the rows are exactly what a cache of t entries gives these queries)."""
    return att[:, t - window:t, :t]


def window_probs(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """[G, W, T] from post-RoPE window queries [G, W, d] and keys [T, d] (the C++ scorer's
    computation)."""
    g, w, d = queries.shape
    t = keys.shape[0]
    logits = (queries @ keys.T) / math.sqrt(d)  # [G, W, T]
    i = torch.arange(w)[:, None]
    j = torch.arange(t)[None, :]
    logits = logits.masked_fill(j > t - w + i, float("-inf"))
    return torch.softmax(logits.float(), dim=-1)


def stats(probs: torch.Tensor) -> torch.Tensor:
    """[T, G * 8] statistics of window attention probs [G, W, T] (see the module doc)."""
    mean = probs.mean(1)
    top = probs.max(1).values
    last = probs[:, -1]
    recent = probs[:, -RECENT:].mean(1)
    raw = torch.stack([mean, top, last, recent], -1)  # [G, T, 4]
    both = torch.cat([raw, torch.log(raw + EPS)], -1)  # [G, T, 8]
    return both.permute(1, 0, 2).reshape(probs.shape[2], -1)


def features(keys: torch.Tensor, values: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """[T, 2d + 8G] from keys, values [T, d] and window probs [G, W, T]."""
    return torch.cat([keys, values, stats(probs)], -1)


def mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
        b2: torch.Tensor) -> torch.Tensor:
    """Scores [..., N] of features x [..., N, F]; weights broadcast over the leading dims
    (w1 [..., 16, F], b1 [..., 16], w2 [..., 16], b2 [...])."""
    h = torch.nn.functional.gelu(x @ w1.transpose(-1, -2) + b1[..., None, :])
    return (h * w2[..., None, :]).sum(-1) + b2[..., None]


def future_importance(att: torch.Tensor, t: int, horizon: int) -> torch.Tensor:
    """[t]: mean attention of the next `horizon` queries (tokens t .. t + horizon - 1) of the group
    to each entry < t, from full-cache probabilities att [G, T_all, T_all]."""
    return att[:, t:t + horizon, :t].mean(dim=(0, 1))


def ranking_loss(scores: torch.Tensor, target: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Mean softplus(-(s_a - s_b)) over pairs [P, 2] of indices into the last dim where
    target[a] > target[b] (pairs are ordered by the caller); scores, target [..., N]."""
    a, b = pairs[:, 0], pairs[:, 1]
    return torch.nn.functional.softplus(-(scores[..., a] - scores[..., b])).mean()
