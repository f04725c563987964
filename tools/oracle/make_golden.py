#!/usr/bin/env python3
"""Writes golden fixtures for the C++ model runtime from engines we did not write.

Fixtures (tests/fixtures/golden/*.json), each recording the model's sha256, the tool versions and
the exact command that made it:

  tokenizer.json  {"model_sha256", "cases": [{"text", "ids"}]}: 30+ strings tokenized by llama.cpp
                  with Llama(vocab_only=True).tokenize(text.encode(), add_bos=False, special=True).
  logits.json     last-position logits ([vocab] float32, base64 of little-endian bytes) for three
                  prompts, from llama.cpp (quantized matmuls, Q8_0 activations) and from Hugging
                  Face transformers loading the same GGUF (dequantized to fp32), plus the max abs
                  difference between the two and each engine's logit range.
  greedy.json     the first 32 greedy tokens for three ChatML prompts from both engines, and
                  whether they agree.

Not run by CI: it needs the oracle venv (tools/oracle/setup_venv.sh --with-torch), ~2 GB of
downloads. Run from anywhere:

  $VENV/bin/python tools/oracle/make_golden.py [--only tokenizer,logits,greedy] [--model PATH]

transformers is optional: without it (or if it cannot load the GGUF offline) the fixtures hold the
llama.cpp side only and say why under "transformers_error".
"""
import argparse
import base64
import json
import os
import pathlib
import platform
import shlex
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "fixtures" / "golden"
# The default model's checksum and hashing live with the script that fetches it.
sys.path.insert(0, str(REPO / "tools" / "setup"))
from fetch_model import SHA256 as MODEL_SHA256, sha256_of  # noqa: E402
N_THREADS = 2
N_CTX = 1024
GREEDY_TOKENS = 32

SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(msg: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
            f"<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n")


TOKENIZER_CASES = [
    "",
    "Hello, world!",
    # unicode: accents, CJK, emoji, RTL, combining marks, odd case mappings
    "café résumé naïve",
    "Ünïcödé façade Ångström Øresund",
    "日本語のテキストを分割します。",
    "中文分词测试，你好世界！",
    "한국어 문장입니다",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷",
    "مرحبا بالعالم",
    "שלום עולם",
    "decomposed e\u0301 a\u0308 n\u0303 vs precomposed é ä ñ",
    "Z\u0351\u0352a\u0353l\u0354g\u0355o",
    "Ǆ ǅ ǆ ß ẞ İ ı",
    "\u00a0non-breaking\u00a0space and\u200bzero\u200bwidth",
    # whitespace runs
    " ",
    "\n",
    "a  b   c    d     e",
    "tab\tseparated\t\tvalues\t",
    "line1\nline2\n\nline4\n\n\n",
    "trailing spaces   ",
    "   leading spaces",
    "  \t \n  mixed \r\n whitespace \t",
    # code
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n"
    "  for (auto& x : v) x *= 2;\n  return 0;\n}\n",
    "x = {'a': [1, 2.5, None], \"b\": f\"{y!r:>10}\"}  # comment",
    "URL: https://example.com/path?q=1&x=2#frag <b>bold</b>",
    # digits
    "12345",
    "3.14159",
    "1,000,000",
    "The year 2024 had 366 days; 0.5% of 1e10 is 5e7, not 123456789.",
    # contractions
    "I'm",
    "they'll",
    "DON'T",
    "We've, you'd, she's, it's, isn't, can't, won't",
    # special tokens inside text
    "<|im_start|>user\nhi<|im_end|>",
    chatml("What is 2+2?"),
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_start|",
    # mixed
    "Mixed: naïve café 東京 🚀 code=x+1; ALL CAPS and lowercase",
]

LOGIT_PROMPTS = [
    ("plain", "The capital of France is Paris. The capital of Germany is Berlin. "
              "The capital of Italy is"),
    ("chat", chatml("Name three primary colors.")),
    ("long", (
        "Caching is one of the oldest ideas in computing. A cache keeps a small, fast copy of data "
        "that lives somewhere larger and slower, so that repeated requests are answered quickly. "
        "Language models rely on the same idea: the key and value vectors computed for earlier "
        "tokens are stored so that each new token attends to them without recomputing the whole "
        "prompt. The cost is memory, which grows with every token and every layer.\n\n"
        "```python\n"
        "def evict(scores, budget):\n"
        "    # keep the highest-scoring entries, drop the rest\n"
        "    order = sorted(range(len(scores)), key=lambda i: -scores[i])\n"
        "    keep = sorted(order[:budget])\n"
        "    return keep\n"
        "```\n\n"
        "The function above keeps the entries with the largest scores. In practice the scores "
        "come from attention weights observed over a window of recent queries, and a few initial "
        "tokens are always kept because the model uses them as attention sinks. When a session "
        "resumes after a tool call, the evicted entries may be needed again, so")),
]

GREEDY_MESSAGES = [
    "What is the capital of France?",
    "Write a Python function that returns the sum of a list.",
    "Explain in two sentences why the sky is blue.",
]


# ---------------------------------------------------------------------------------------------
# Provenance


def tool_versions(with_hf: bool) -> dict:
    import llama_cpp
    versions = {"python": platform.python_version(), "llama_cpp_python": llama_cpp.__version__,
                "numpy": np.__version__}
    try:
        import gguf
        versions["gguf"] = getattr(gguf, "__version__", None) or _dist_version("gguf")
    except ImportError:
        pass
    if with_hf:
        for name in ("transformers", "torch", "tokenizers"):
            try:
                versions[name] = __import__(name).__version__
            except ImportError:
                pass
    return versions


def _dist_version(name: str):
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def provenance(args, model_sha: str, with_hf: bool) -> dict:
    script = pathlib.Path(sys.argv[0]).resolve()
    try:
        script_arg = str(script.relative_to(REPO))
    except ValueError:
        script_arg = str(script)
    return {
        "model": os.path.basename(args.model),
        "model_sha256": model_sha,
        "generated_by": "tools/oracle/make_golden.py",
        "command": shlex.join(["python3", script_arg] + sys.argv[1:]),
        "python_executable": sys.executable,
        "tool_versions": tool_versions(with_hf),
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(name: str, doc: dict, case_key: str = None) -> None:
    """Writes `doc` with one list element per line under `case_key` (readable diffs)."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / name
    if case_key is None:
        text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    else:
        head = {k: v for k, v in doc.items() if k != case_key}
        lines = [json.dumps(c, ensure_ascii=False) for c in doc[case_key]]
        text = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
        text += f',\n "{case_key}": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
        json.loads(text)  # the hand-joined text must still be valid JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes)", file=sys.stderr)


def encode_f32(vec) -> str:
    return base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode("ascii")


def top_k(vec: np.ndarray, k: int = 10) -> list:
    return [int(i) for i in np.argsort(-vec, kind="stable")[:k]]


# ---------------------------------------------------------------------------------------------
# llama.cpp


def llama_vocab(model: str):
    from llama_cpp import Llama
    return Llama(model_path=model, vocab_only=True, verbose=False)


def llama_full(model: str):
    from llama_cpp import Llama
    return Llama(model_path=model, logits_all=False, n_threads=N_THREADS, n_ctx=N_CTX, seed=0,
                 verbose=False)


def llama_tokenize(vocab, text: str) -> list:
    return [int(t) for t in vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)]


def llama_last_logits(llm, tokens: list) -> np.ndarray:
    """Evaluates `tokens` after a reset and returns the last position's logits."""
    import llama_cpp
    llm.reset()
    llm.eval(tokens)
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()


def margin(logits) -> float:
    """logit[top1] - logit[top2]: how close a greedy step was to a tie."""
    a, b = np.partition(np.asarray(logits, dtype=np.float32), -2)[-2:][::-1]
    return round(float(a - b), 4)


def llama_greedy(llm, tokens: list, n: int, stop_ids: set):
    """Plain argmax decoding (no sampler chain, so no repeat penalty): stops after `n` tokens or
    after emitting a stop token (which is included). Returns (tokens, per-step top1-top2 margin)."""
    import llama_cpp
    out, margins = [], []
    llm.reset()
    llm.eval(tokens)
    for _ in range(n):
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        logits = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))
        tok = int(np.argmax(logits))
        out.append(tok)
        margins.append(margin(logits))
        if tok in stop_ids:
            break
        llm.eval([tok])
    return out, margins


# ---------------------------------------------------------------------------------------------
# Hugging Face transformers (optional)


class HfModel:
    def __init__(self, model_path: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM
        torch.set_num_threads(N_THREADS)
        path = pathlib.Path(model_path).resolve()
        kwargs = {"gguf_file": path.name}
        try:  # transformers >= 4.56 calls it `dtype`; older versions only know `torch_dtype`
            self.model = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32,
                                                              **kwargs)
        except TypeError:
            self.model = AutoModelForCausalLM.from_pretrained(str(path.parent),
                                                              torch_dtype=torch.float32, **kwargs)
        self.model.eval()
        self.torch = torch
        self.path = path

    def last_logits(self, tokens: list) -> np.ndarray:
        with self.torch.no_grad():
            ids = self.torch.tensor([tokens], dtype=self.torch.long)
            out = self.model(input_ids=ids, use_cache=False)
        return out.logits[0, -1].float().numpy().astype(np.float32)

    def greedy(self, tokens: list, n: int, stop_ids: set) -> list:
        """Argmax decoding with the KV cache (do_sample=False semantics, no penalties)."""
        out, margins, past = [], [], None
        ids = self.torch.tensor([tokens], dtype=self.torch.long)
        with self.torch.no_grad():
            for _ in range(n):
                res = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = res.past_key_values
                tok = int(self.torch.argmax(res.logits[0, -1]))
                out.append(tok)
                margins.append(margin(res.logits[0, -1].float().numpy()))
                if tok in stop_ids:
                    break
                ids = self.torch.tensor([[tok]], dtype=self.torch.long)
        return out, margins

    def generate(self, tokens: list, n: int, eos_id: int) -> list:
        """The same through model.generate(do_sample=False), as a cross-check of greedy()."""
        with self.torch.no_grad():
            ids = self.torch.tensor([tokens], dtype=self.torch.long)
            res = self.model.generate(input_ids=ids, attention_mask=self.torch.ones_like(ids),
                                      do_sample=False, max_new_tokens=n, repetition_penalty=1.0,
                                      eos_token_id=eos_id, pad_token_id=eos_id, top_k=None,
                                      top_p=None, temperature=None)
        return [int(t) for t in res[0, len(tokens):]]

    def tokenize(self, text: str):
        from transformers import AutoTokenizer
        if not hasattr(self, "tok"):
            self.tok = AutoTokenizer.from_pretrained(str(self.path.parent), gguf_file=self.path.name)
        return [int(t) for t in self.tok.encode(text, add_special_tokens=False)]


def load_hf(args):
    if args.no_hf:
        return None, "disabled with --no-hf"
    try:
        return HfModel(args.model), None
    except Exception as e:  # report why instead of failing the llama.cpp half
        import traceback
        traceback.print_exc()
        return None, f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------------------------------------
# Fixtures


def make_tokenizer(args, sha, hf, hf_error):
    vocab = llama_vocab(args.model)
    cases = [{"text": t, "ids": llama_tokenize(vocab, t)} for t in TOKENIZER_CASES]
    doc = provenance(args, sha, hf is not None)
    doc["engine"] = "llama.cpp: Llama(vocab_only=True).tokenize(add_bos=False, special=True)"
    if hf is not None:
        try:
            diffs = []
            for c in cases:
                hf_ids = hf.tokenize(c["text"])
                if hf_ids != c["ids"]:
                    diffs.append({"text": c["text"], "hf_ids": hf_ids})
            doc["transformers_disagreements"] = diffs
        except Exception as e:
            doc["transformers_error"] = f"tokenizer: {type(e).__name__}: {e}"
    elif hf_error:
        doc["transformers_error"] = hf_error
    doc["cases"] = cases
    write_json("tokenizer.json", doc, "cases")


def logit_entry(name, vec):
    return {"engine": name, "min": float(vec.min()), "max": float(vec.max()),
            "argmax": int(vec.argmax()), "top10": top_k(vec), "logits_f32_b64": encode_f32(vec)}


def make_logits(args, sha, hf, hf_error):
    vocab = llama_vocab(args.model)
    llm = llama_full(args.model)
    doc = provenance(args, sha, hf is not None)
    doc["n_vocab"] = llm.n_vocab()
    doc["encoding"] = "logits_f32_b64: base64 of [n_vocab] little-endian float32"
    doc["llama_cpp_settings"] = {"n_threads": N_THREADS, "n_ctx": N_CTX, "logits_all": False,
                                 "note": "Q4_1 weights x Q8_0-quantized activations"}
    doc["transformers_settings"] = {"dtype": "float32", "note": "GGUF dequantized to fp32"}
    if hf_error:
        doc["transformers_error"] = hf_error
    prompts = []
    for name, text in LOGIT_PROMPTS:
        tokens = llama_tokenize(vocab, text)
        ref = llama_last_logits(llm, tokens)
        entry = {"name": name, "text": text, "prompt_tokens": tokens,
                 "n_tokens": len(tokens), "results": [logit_entry("llama.cpp", ref)]}
        if hf is not None:
            other = hf.last_logits(tokens)
            entry["results"].append(logit_entry("transformers", other))
            entry["max_abs_diff"] = float(np.max(np.abs(ref - other)))
            entry["argmax_agree"] = int(ref.argmax()) == int(other.argmax())
        print(f"logits {name}: {len(tokens)} tokens, max_abs_diff="
              f"{entry.get('max_abs_diff')}", file=sys.stderr)
        prompts.append(entry)
    doc["prompts"] = prompts
    write_json("logits.json", doc)


def make_greedy(args, sha, hf, hf_error):
    vocab = llama_vocab(args.model)
    llm = llama_full(args.model)
    eos = int(llm.token_eos())
    stop_ids = {eos}
    doc = provenance(args, sha, hf is not None)
    doc["max_new_tokens"] = GREEDY_TOKENS
    doc["stop_token_ids"] = sorted(stop_ids)
    doc["method"] = ("argmax of the last logits after each step; no sampler, no repeat penalty; "
                     "stops after max_new_tokens or after a stop token (included). *_margins: "
                     "logit[top1] - logit[top2] at each step; a step with a small margin can "
                     "flip between engines (fp32 vs Q8_0 activations), and everything after it "
                     "then differs")
    if hf_error:
        doc["transformers_error"] = hf_error
    cases = []
    for msg in GREEDY_MESSAGES:
        prompt = chatml(msg)
        tokens = llama_tokenize(vocab, prompt)
        ref, ref_margins = llama_greedy(llm, tokens, GREEDY_TOKENS, stop_ids)
        case = {"message": msg, "prompt": prompt, "prompt_tokens": tokens,
                "llama_cpp": ref, "llama_cpp_text": vocab.detokenize(ref).decode("utf-8", "replace"),
                "llama_cpp_margins": ref_margins}
        if hf is not None:
            other, other_margins = hf.greedy(tokens, GREEDY_TOKENS, stop_ids)
            gen = hf.generate(tokens, GREEDY_TOKENS, eos)
            case["transformers"] = other
            case["transformers_text"] = vocab.detokenize(other).decode("utf-8", "replace")
            case["transformers_margins"] = other_margins
            case["transformers_generate_matches_loop"] = gen == other
            case["agree"] = ref == other
            n = 0
            while n < min(len(ref), len(other)) and ref[n] == other[n]:
                n += 1
            case["common_prefix"] = n
        print(f"greedy {msg!r}: {case['llama_cpp_text']!r} agree={case.get('agree')}",
              file=sys.stderr)
        cases.append(case)
    doc["cases"] = cases
    if hf is not None:
        doc["all_agree"] = all(c["agree"] for c in cases)
    write_json("greedy.json", doc)


def default_model() -> str:
    root = os.environ.get("GLIMPSE_CACHE_DIR") or os.path.expanduser("~/.cache/glimpse")
    return os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=default_model())
    parser.add_argument("--only", default="tokenizer,logits,greedy",
                        help="comma-separated subset of tokenizer,logits,greedy")
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers reference")
    args = parser.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"make_golden: model {args.model} not found; run tools/setup/fetch_model.py")
    sha = sha256_of(pathlib.Path(args.model))
    if sha != MODEL_SHA256:
        sys.exit(f"make_golden: {args.model} has sha256 {sha}, expected {MODEL_SHA256}")
    hf, hf_error = load_hf(args)
    makers = {"tokenizer": make_tokenizer, "logits": make_logits, "greedy": make_greedy}
    for name in args.only.split(","):
        if name not in makers:
            sys.exit(f"make_golden: unknown fixture {name!r}; choose from {sorted(makers)}")
        makers[name](args, sha, hf, hf_error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
