#!/usr/bin/env python3
"""K-quant blocks and their values as gguf-py (GGML's Python package) decodes them.

Writes tests/fixtures/kquants/kquants.txt for kernels/cpu/quant_test.cc: for each of Q4_K, Q5_K and
Q6_K, `rows` rows of `n` elements of seeded random blocks (random quants and sub-block scales,
finite fp16 super-block scales), then gguf.quants.dequantize's fp32 values. Format, per type:

    <type name> <rows> <n>
    <the rows' bytes, hex>
    <rows * n values, %.9g (float32 round trip), space-separated>

Lines starting with '#' are comments. Run in the oracle venv (tools/oracle/setup_venv.sh):

    ~/.cache/glimpse/venv-oracle/bin/python tools/oracle/make_kquant_fixture.py
"""
import os
import sys
from importlib import metadata

import numpy as np
from gguf import GGMLQuantizationType, quants
from gguf.constants import GGML_QUANT_SIZES

ROWS, N, SEED = 3, 512, 7
# Where the fp16 super-block scales sit in a block, per type: (offset, count).
SCALE_FIELDS = {"Q4_K": [(0, 2)], "Q5_K": [(0, 2)], "Q6_K": [(208, 1)]}


def blocks(name, rng):
    qtype = GGMLQuantizationType[name]
    elems, size = GGML_QUANT_SIZES[qtype]
    nb = ROWS * N // elems
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for offset, count in SCALE_FIELDS[name]:
        scales = rng.uniform(-0.05, 0.05, size=(nb, count)).astype(np.float16)
        raw[:, offset:offset + 2 * count] = scales.view(np.uint8).reshape(nb, 2 * count)
    return qtype, raw


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "..", "tests", "fixtures", "kquants", "kquants.txt")
    rng = np.random.default_rng(SEED)
    lines = [f"# made by tools/oracle/make_kquant_fixture.py with gguf {metadata.version('gguf')}, "
             f"numpy {np.__version__}, seed {SEED}"]
    for name in ("Q4_K", "Q5_K", "Q6_K"):
        qtype, raw = blocks(name, rng)
        values = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == ROWS * N and np.all(np.isfinite(values))
        lines.append(f"{name} {ROWS} {N}")
        lines.append(raw.tobytes().hex())
        lines.append(" ".join(f"{v:.9g}" for v in values))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {os.path.normpath(out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
