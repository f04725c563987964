"""LookaheadKV in PyTorch: the trainable module and the two attention read-outs it is trained on.

LookaheadKV (arXiv 2603.10899) appends n learned embeddings after the prompt (positions continuing
after it) and runs them through the frozen model with a LoRA on q, k, v, o, gate, up and down that
is active on those rows only. The score of prompt key j in (layer, kv-head h) is the mean over the
lookahead rows and over h's GQA group of their softmax attention probability on j, read without
renormalisation: exactly what Glimpse's C++ scorer computes (core/eviction/lookahead_pass.h).

Prompt rows never see the LoRA, so the prompt's KV cache is computed once without gradients and
every lookahead pass attends over it: the joint pass and this two-pass form are the same function.

Training target (the paper's): the mean attention of the model's own greedy response to each
prompt key, per (layer, kv-head), normalised to sum 1; loss KL(target || normalised scores),
averaged over layers and kv-heads.
"""
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

PROJECTIONS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def example_paths(data: pathlib.Path, count: int = 0) -> list:
    """make_data.py's example files in DIR/examples in their order: the first `count`, or all
    with count 0. Exits naming the directory when there are none, or fewer than `count`."""
    paths = sorted((data / "examples").glob("*.pt"))
    if count:
        paths = paths[:count]
    if not paths or len(paths) < count:
        sys.exit(f"{data}/examples has {len(paths)} examples"
                 f"{f' of {count}' if count else ''}: run tools/lookahead/make_data.py first")
    return paths


def lora_name(layer: int, module: str, which: str) -> str:
    """PEFT's tensor name, as core/eviction/lookahead_module.h reads it."""
    return f"base_model.model.model.layers.{layer}.{module}.lora_{which}.weight"


def load_model(gguf: pathlib.Path):
    """The GGUF model dequantised to fp32 by transformers, frozen, eager attention (the read-outs
    need attention probabilities). Glimpse's runtime matches this model's logits to ~4e-5."""
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


class LookaheadModule(torch.nn.Module):
    """n lookahead embeddings [n, D] and LoRA factors A [r, in], B [out, r] per layer and
    projection (PEFT init: A Kaiming-uniform, B zero, so training starts from the plain model)."""

    def __init__(self, model, n_lookahead: int, rank: int, alpha: float, init_ids: list):
        super().__init__()
        self.n, self.rank, self.alpha = n_lookahead, rank, alpha
        embed = model.model.embed_tokens.weight
        ids = (init_ids * (n_lookahead // len(init_ids) + 1))[:n_lookahead]
        self.embeddings = torch.nn.Parameter(embed[torch.tensor(ids)].clone())
        self.a = torch.nn.ParameterDict()
        self.b = torch.nn.ParameterDict()
        for i, layer in enumerate(model.model.layers):
            for name in PROJECTIONS:
                linear = layer.get_submodule(name)
                key = f"{i}_{name.replace('.', '_')}"
                a = torch.empty(rank, linear.in_features)
                torch.nn.init.kaiming_uniform_(a, a=5 ** 0.5)
                self.a[key] = torch.nn.Parameter(a)
                self.b[key] = torch.nn.Parameter(torch.zeros(linear.out_features, rank))

    def hooks(self, model):
        """Forward hooks adding scale * B (A x) to every row: install only around lookahead
        passes (all their rows are lookahead rows)."""
        scale = self.alpha / self.rank
        handles = []
        for i, layer in enumerate(model.model.layers):
            for name in PROJECTIONS:
                key = f"{i}_{name.replace('.', '_')}"

                def hook(mod, inputs, out, key=key):
                    return out + scale * (inputs[0] @ self.a[key].T) @ self.b[key].T
                handles.append(layer.get_submodule(name).register_forward_hook(hook))
        return handles

    def tensors(self) -> dict:
        """The safetensors content under the names the C++ loader reads."""
        out = {"lookahead_embeddings": self.embeddings.detach().contiguous()}
        for key in self.a:
            layer, rest = key.split("_", 1)
            name = next(p for p in PROJECTIONS if p.replace(".", "_") == rest)
            out[lora_name(int(layer), name, "A")] = self.a[key].detach().contiguous()
            out[lora_name(int(layer), name, "B")] = self.b[key].detach().contiguous()
        return out

    def load_tensors(self, tensors: dict) -> None:
        with torch.no_grad():
            self.embeddings.copy_(tensors["lookahead_embeddings"])
            for key in self.a:
                layer, rest = key.split("_", 1)
                name = next(p for p in PROJECTIONS if p.replace(".", "_") == rest)
                self.a[key].copy_(tensors[lora_name(int(layer), name, "A")])
                self.b[key].copy_(tensors[lora_name(int(layer), name, "B")])


def prompt_cache(model, token_ids: list) -> list:
    """[(keys, values)] per layer, each [1, Hkv, T, hd], of the plain prompt prefill."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([token_ids]), use_cache=True)
    return [(layer.keys, layer.values) for layer in out.past_key_values.layers]


def cache_of(kv: list) -> DynamicCache:
    """A transformers cache holding the prompt's [(keys, values)] per layer, as fp32."""
    cache = DynamicCache()
    for i, (k, v) in enumerate(kv):
        cache.update(k.float(), v.float(), i)
    return cache


def _group_mean(attentions, n_kv_heads: int, T: int) -> torch.Tensor:
    """[L, Hkv, T]: rows' attention to the first T keys, mean over rows and GQA group."""
    out = []
    for att in attentions:  # [1, H, rows, T + rows]
        rows = att[0, :, :, :T]
        h = rows.shape[0]
        out.append(rows.reshape(n_kv_heads, h // n_kv_heads, rows.shape[1], T).mean(dim=(1, 2)))
    return torch.stack(out)


def lookahead_scores(model, module: LookaheadModule, kv: list) -> torch.Tensor:
    """[L, Hkv, T] LookaheadKV scores (with gradients to the module)."""
    T = kv[0][0].shape[2]
    handles = module.hooks(model)
    try:
        out = model(inputs_embeds=module.embeddings[None], past_key_values=cache_of(kv),
                    position_ids=torch.arange(T, T + module.n)[None], output_attentions=True,
                    use_cache=True)
    finally:
        for h in handles:
            h.remove()
    return _group_mean(out.attentions, model.config.num_key_value_heads, T)


def response_targets(model, kv: list, response_ids: list, turns: list = None) -> torch.Tensor:
    """[L, Hkv, T] mean attention of the teacher-forced response rows to the prompt keys,
    normalised to sum 1 over T (the training target). `turns`: the rows of each turn when the
    response spans several (the answer, then the next user turn and its answer); each turn's mean
    is normalised alone and the turns weigh alike, so a short answer counts as much as the longer
    turn after it."""
    T = kv[0][0].shape[2]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([response_ids]), past_key_values=cache_of(kv),
                    position_ids=torch.arange(T, T + len(response_ids))[None],
                    output_attentions=True, use_cache=True)
    assert turns is None or sum(turns) == len(response_ids), "turns must cover the response"
    targets, start = [], 0
    for n in turns or [len(response_ids)]:
        rows = [att[:, :, start:start + n] for att in out.attentions]
        target = _group_mean(rows, model.config.num_key_value_heads, T).double()
        targets.append(target / target.sum(dim=-1, keepdim=True))
        start += n
    return torch.stack(targets).mean(dim=0).float()


def kl_loss(target: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Mean over layers and kv-heads of KL(target || scores normalised over T)."""
    p = scores / scores.sum(dim=-1, keepdim=True)
    t = target.clamp_min(1e-12)
    return (t * (t.log() - p.clamp_min(1e-12).log())).sum(dim=-1).mean()
