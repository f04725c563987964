#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention at the shapes glimpse_bench_cuda times, and the ratio.

Llama-3.2-1B's attention (32 q-heads, 8 kv-heads, head_dim 64), fp16, causal, one sequence of
2K/8K/32K tokens; TFLOP/s count the causal half of 4·T²·D·H, as glimpse_bench_cuda does. With
--ours (glimpse_bench_cuda's --json), prints ours / PyTorch per length.

    python3 bench/cuda_sdpa_peer.py [--ours figures.json] [--json out.json]
"""
import argparse
import json
import sys


def time_ms(fn, iters):
    import torch
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", help="glimpse_bench_cuda --json output")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="2K only")
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("PyTorch is not installed: no peer figures")
        return 77
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 77
    heads, kv_heads, dim = 32, 8, 64
    lengths = [2048] if args.quick else [2048, 8192, 32768]
    ours = {}
    if args.ours:
        with open(args.ours) as f:
            for fig in json.load(f)["figures"]:
                if fig["kind"] == "attention":
                    ours[int(fig["tokens"])] = fig["tflops"]
    print(f"PyTorch {torch.__version__} SDPA on {torch.cuda.get_device_name()}")
    results = []
    for t in lengths:
        q = torch.randn(1, heads, t, dim, device="cuda", dtype=torch.float16)
        k = torch.randn(1, kv_heads, t, dim, device="cuda", dtype=torch.float16)
        v = torch.randn(1, kv_heads, t, dim, device="cuda", dtype=torch.float16)
        ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                            enable_gqa=True),
                     3 if t >= 32768 else 10)
        tflops = 2.0 * t * t * dim * heads / (ms * 1e9)
        line = f"  T={t:<6} {ms:8.2f} ms  {tflops:7.1f} TFLOP/s"
        if t in ours:
            line += f"   ours {ours[t]:6.1f} TFLOP/s = {ours[t] / tflops:.2f}x PyTorch"
        print(line, flush=True)
        results.append({"tokens": t, "ms": ms, "tflops": tflops,
                        "ours_ratio": ours[t] / tflops if t in ours else None})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "sdpa": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
