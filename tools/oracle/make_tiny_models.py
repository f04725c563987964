#!/usr/bin/env python3
"""Writes tiny randomly-initialised Hugging Face checkpoints and their golden outputs.

The C++ runtime's Qwen2, Qwen3 and Llama-3-rope-scaling paths and its safetensors / tokenizer.json
loaders are checked (tests/tiny_models_test.cc) against these, made here by transformers' own model
classes and the `tokenizers` library, which we did not write. Each model lives in
tests/fixtures/tiny/<name>/:

  config.json, model.safetensors, generation_config.json   save_pretrained(safe_serialization=True)
  tokenizer.json          byte-level BPE (GPT-2 regex) trained on the GPL-3 text shipped by Debian,
                          297 learned tokens + <|endoftext|>, <|im_start|>, <|im_end|> (ids 297-299)
  tokenizer_config.json   ChatML chat_template, eos_token "<|im_end|>"
  golden.json             {"generated_by", "command", "tool_versions", "model", "token_ids",
                           "logits_f32_b64": base64 of little-endian float32 [T, vocab], every
                           position, transformers fp32 eager attention, "greedy": 16 argmax tokens
                           continuing token_ids (eos ignored; full recompute per step),
                           "greedy_min_margin": smallest top-1 minus top-2 logit on that path,
                           "tokenizer_cases": [{"text", "ids"}] from AutoTokenizer with
                           add_special_tokens=False}

Models (hidden 64, 2 layers, SwiGLU 128, GQA 4 query / 2 key-value heads):
  llama3  LlamaConfig, rope llama3 scaling (factor 8, low 1, high 4, original 64) so that bands are
          kept, smoothed and divided; untied lm_head; float32.
  qwen2   Qwen2Config, q/k/v bias, tied embeddings, rope_theta 1e6, vocab padded to 320 rows past
          the 300-token tokenizer; stored bfloat16 (goldens use the stored weights upcast to fp32).
  qwen3   Qwen3Config, per-head q/k RMSNorm, head_dim 32 != 64 / 4, tied embeddings, float16
          (goldens use the stored weights upcast to fp32).

Weights are drawn with a fixed seed at a scale (std 0.25, norm weights 1 ± 0.25, biases ± 0.5) large
enough that attention is far from uniform: with transformers' default std 0.02 every attention
score is ~0 and RoPE, biases or norm weights could be wrong without changing the logits. The script
checks that sensitivity: it re-runs llama3 without rope scaling and qwen2 without biases and fails
unless the logits move by far more than the C++ test's tolerance.

Not run by CI. Needs the oracle venv with torch (tools/oracle/setup_venv.sh --with-torch); no
network (HF_HUB_OFFLINE=1 is set here). Run from anywhere:

  $VENV/bin/python tools/oracle/make_tiny_models.py [--only llama3,qwen2,qwen3]
"""
import argparse
import base64
import json
import os
import pathlib
import platform
import shlex
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "fixtures" / "tiny"
CORPUS = pathlib.Path("/usr/share/common-licenses/GPL-3")
CORPUS_BYTES = 8192
LEARNED_VOCAB = 297  # 256 byte tokens + 41 merges; the 3 special tokens follow
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
END_OF_GENERATION = {"<|endoftext|>", "<|im_end|>"}  # what the C++ Generate() stops at
PROMPT_TOKENS = 24
GREEDY_TOKENS = 16
SEED = 1234
WEIGHT_STD = 0.25

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

TOKENIZER_CASES = [
    "",
    "Hello, world!",
    "the GNU General Public License",
    "  leading spaces and trailing  ",
    "numbers 12345 and 3.14159",
    "don't we'll they're I'm",
    "tabs\tand\nnewlines\n\n",
    "café résumé 日本語 🙂",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>assistant\nOK<|endoftext|>",
    "Copyright (C) 2007 Free Software Foundation, Inc. <https://fsf.org/>",
]

# Prompt texts tried in order; the first whose greedy continuation has no end-of-generation token
# and a clear argmax at every step is used (so the C++ Generate() runs all 16 steps).
PROMPT_TEXTS = [
    "<|im_start|>user\nWhat does the General Public License say about copies?<|im_end|>\n",
    "<|im_start|>user\nThe licenses for most software are designed to take away freedom",
    "When we speak of free software, we are referring to freedom, not price. Our licenses",
    "To protect your rights, we need to prevent others from denying you these rights",
]


def tool_versions() -> dict:
    import tokenizers
    import transformers
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__}


def command() -> str:
    script = pathlib.Path(sys.argv[0]).resolve()
    try:
        script_arg = str(script.relative_to(REPO))
    except ValueError:
        script_arg = str(script)
    return shlex.join(["python3", script_arg] + sys.argv[1:])


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    text = CORPUS.read_bytes()[:CORPUS_BYTES].decode("utf-8")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=LEARNED_VOCAB, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.split("\n\n"), trainer)
    assert tok.get_vocab_size() == LEARNED_VOCAB, tok.get_vocab_size()
    tok.add_special_tokens(SPECIAL_TOKENS)
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == LEARNED_VOCAB + i
    return tok


def write_tokenizer(tok, out: pathlib.Path) -> None:
    tok.save(str(out / "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": True}
             for t in SPECIAL_TOKENS}
    config = {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
              "bos_token": None, "chat_template": CHATML_TEMPLATE, "clean_up_tokenization_spaces":
              False, "eos_token": "<|im_end|>", "model_max_length": 512,
              "pad_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def model_spec(name: str, tok):
    """(config, model class, stored dtype)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    from transformers import Qwen3Config, Qwen3ForCausalLM
    common = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=tok.get_vocab_size(),
                  bos_token_id=tok.token_to_id("<|endoftext|>"),
                  eos_token_id=tok.token_to_id("<|im_end|>"), rms_norm_eps=1e-6)
    if name == "llama3":
        config = LlamaConfig(**common, max_position_embeddings=512, tie_word_embeddings=False,
                             rope_scaling={"rope_type": "llama3", "rope_theta": 10000.0,
                                           "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64})
        return config, LlamaForCausalLM, torch.float32
    if name == "qwen2":
        common["vocab_size"] = 320  # padded embedding table, as real Qwen checkpoints have
        config = Qwen2Config(**common, max_position_embeddings=512, tie_word_embeddings=True,
                             rope_theta=1e6)
        return config, Qwen2ForCausalLM, torch.bfloat16
    if name == "qwen3":
        config = Qwen3Config(**common, head_dim=32, max_position_embeddings=512,
                             tie_word_embeddings=True, rope_theta=1e6)
        return config, Qwen3ForCausalLM, torch.float16
    raise ValueError(name)


def randomise(model, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + WEIGHT_STD * noise)
            elif name.endswith(".bias"):
                p.copy_(0.5 * noise)
            else:
                p.copy_(WEIGHT_STD * noise)


def all_logits(model, ids: list) -> np.ndarray:
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()  # [T, vocab]


def greedy(model, ids: list, n: int):
    """Argmax loop with a full recompute per step (no KV cache), eos ignored."""
    ids = list(ids)
    out, margin = [], float("inf")
    for _ in range(n):
        last = all_logits(model, ids)[-1]
        top2 = np.sort(last)[-2:]
        margin = min(margin, float(top2[1] - top2[0]))
        token = int(np.argmax(last))
        out.append(token)
        ids.append(token)
    return out, margin


def choose_prompt(model, tok):
    stop_ids = {tok.token_to_id(t) for t in END_OF_GENERATION}
    for text in PROMPT_TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids[:PROMPT_TOKENS]
        assert len(ids) == PROMPT_TOKENS, (text, len(ids))
        cont, margin = greedy(model, ids, GREEDY_TOKENS)
        if not stop_ids.intersection(cont) and margin > 1e-2:
            return ids, cont, margin
        print(f"  prompt {text[:30]!r}: continuation {cont} (margin {margin:.3g}) rejected",
              file=sys.stderr)
    raise SystemExit("no prompt gives a clean 16-token greedy continuation")


def check_sensitive(name: str, model_cls, config, out: pathlib.Path, logits: np.ndarray,
                    ids: list) -> dict:
    """Logit change when the feature under test is switched off (must dwarf the tolerance)."""
    if name == "llama3":
        config = config.__class__.from_pretrained(out)
        config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
        what = "rope_scaling removed"
        model = model_cls.from_pretrained(out, config=config, dtype=torch.float32,
                                          attn_implementation="eager").eval()
    elif name == "qwen2":
        what = "q/k/v bias zeroed"
        model = model_cls.from_pretrained(out, dtype=torch.float32,
                                          attn_implementation="eager").eval()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith(".bias"):
                    p.zero_()
    else:
        what = "q/k norm weights set to 1"
        model = model_cls.from_pretrained(out, dtype=torch.float32,
                                          attn_implementation="eager").eval()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "q_norm" in n or "k_norm" in n:
                    p.fill_(1.0)
    diff = float(np.abs(all_logits(model, ids) - logits).max())
    rng = float(logits.max() - logits.min())
    print(f"  sensitivity ({what}): max |Δlogit| = {diff:.3g}, range {rng:.3g}", file=sys.stderr)
    assert diff > 1e-2 * rng, f"{name}: the fixture does not exercise {what}"
    return {"what": what, "max_abs_logit_change": diff}


def make(name: str, tok) -> None:
    from transformers import AutoTokenizer
    out = OUT_DIR / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    config, model_cls, stored_dtype = model_spec(name, tok)
    torch.manual_seed(SEED)
    model = model_cls(config)
    randomise(model, torch.Generator().manual_seed(SEED))
    model.to(stored_dtype).save_pretrained(out, safe_serialization=True)
    write_tokenizer(tok, out)

    # Goldens come from what was stored: reloaded from disk and upcast to fp32.
    model = model_cls.from_pretrained(out, dtype=torch.float32,
                                      attn_implementation="eager").eval()
    ids, cont, margin = choose_prompt(model, tok)
    logits = all_logits(model, ids)
    sensitivity = check_sensitive(name, model_cls, config, out, logits, ids)
    hf_tok = AutoTokenizer.from_pretrained(out)
    cases = []
    for text in TOKENIZER_CASES:
        enc = hf_tok(text, add_special_tokens=False)["input_ids"]
        assert enc == tok.encode(text, add_special_tokens=False).ids, text
        cases.append({"text": text, "ids": enc})

    doc = {
        "generated_by": "tools/oracle/make_tiny_models.py",
        "command": command(),
        "tool_versions": tool_versions(),
        "model": name,
        "stored_dtype": str(stored_dtype).removeprefix("torch."),
        "vocab_size": int(logits.shape[1]),
        "tokenizer_vocab_size": tok.get_vocab_size(),
        "token_ids": ids,
        "logits_shape": list(logits.shape),
        "logits_range": float(logits.max() - logits.min()),
        "logits_f32_b64": base64.b64encode(logits.astype("<f4").tobytes()).decode("ascii"),
        "greedy": cont,
        "greedy_min_margin": margin,
        "sensitivity": sensitivity,
        "tokenizer_cases": cases,
    }
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    (out / "golden.json").write_text(text, encoding="utf-8")
    sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    print(f"wrote {out.relative_to(REPO)}: {sum(sizes.values())} bytes {sizes}", file=sys.stderr)
    print(f"  token_ids {ids}\n  greedy {cont} (min margin {margin:.3g})", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="llama3,qwen2,qwen3",
                        help="comma-separated subset of llama3,qwen2,qwen3")
    args = parser.parse_args()
    torch.set_num_threads(1)  # reproducible reductions
    tok = train_tokenizer()
    for name in args.only.split(","):
        make(name, tok)


if __name__ == "__main__":
    main()
