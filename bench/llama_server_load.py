#!/usr/bin/env python3
"""The cluster benchmark's load experiment against llama.cpp's own server (the anchor).

For each count N in --sessions, starts `llama-server --parallel N --cont-batching` on the GGUF
with --threads threads, runs one uncounted warm-up session, then N client threads at once, each a
--turns-turn session shaped as bench/cluster_bench.cc's (the same ChatML texts: a short story
request, then follow-ups that append the answer and a new question; greedy, --max_tokens per
turn; the server keeps each slot's prompt cache, as Glimpse keeps a session hot), streamed over
HTTP: generated tokens/s over the wall time, TTFT (request to first streamed token) and
inter-token latency (gaps between streamed tokens, per token) p50/p99 -- the figures the Glimpse
load experiment prints. Prints a table on stdout, progress on stderr, and writes JSON to --json.

Only the standard library: runs under any python3.
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time

from load_clients import run_clients

TOPICS = ["a lighthouse keeper", "a lost robot", "a mountain village", "a river pilot",
          "a clockmaker", "a desert station", "a night train", "a library cat"]


def first_turn(k):
    return (f"<|im_start|>system\nYou are a helpful assistant (client {k}).<|im_end|>\n"
            f"<|im_start|>user\nWrite a long, detailed story about {TOPICS[k % 8]}."
            "<|im_end|>\n<|im_start|>assistant\n")


def follow_up(k, ended):
    return ("" if ended else "<|im_end|>") + (
        f"\n<|im_start|>user\nFollow-up {k}: now list every entry that mentions a shelf number "
        "above 40, and for each one say which room it came from and on which day.<|im_end|>\n"
        "<|im_start|>assistant\n")


def quantile(xs, q):
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


class Server:
    def __init__(self, binary, model, threads, parallel, ctx_per_slot):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(f"/tmp/llama-server-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port),
             "--threads", str(threads), "--threads-batch", str(threads),
             "--parallel", str(parallel), "--cont-batching", "--ctx-size",
             str(ctx_per_slot * parallel), "--n-gpu-layers", "0"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); see "
                                   f"{self.log.name}")
            try:
                status, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"llama-server did not become healthy; see {self.log.name}")

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None,
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def tokenize(self, text):
        status, data = self.request("POST", "/tokenize",
                                    {"content": text, "add_special": False,
                                     "parse_special": True})
        if status != 200:
            raise RuntimeError(f"/tokenize: HTTP {status}: {data[:200]!r}")
        return json.loads(data)["tokens"]

    def stream_turn(self, prompt_ids, max_tokens):
        """One streamed completion; returns (generated ids, ttft s, [itl s], wall s)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        body = {"prompt": prompt_ids, "n_predict": max_tokens, "stream": True,
                "cache_prompt": True, "temperature": 0.0, "return_tokens": True}
        t0 = time.perf_counter()
        conn.request("POST", "/completion", json.dumps(body),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"/completion: HTTP {r.status}: {r.read()[:200]!r}")
        generated, itl, ttft, last = [], [], None, 0.0
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            tokens = event.get("tokens") or []
            if tokens:
                now = time.perf_counter() - t0
                if ttft is None:
                    ttft = now
                else:
                    itl.extend([(now - last) / len(tokens)] * len(tokens))
                last = now
                generated.extend(tokens)
            if event.get("stop"):
                break
        conn.close()
        if ttft is None:
            raise RuntimeError("a turn streamed no tokens")
        return generated, ttft, itl, time.perf_counter() - t0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_sessions(server, sessions, turns, max_tokens, eog_ids):
    def client(k):
        ids = server.tokenize(first_turn(k))
        out = []
        for i in range(turns):
            if i > 0:
                answer = out[-1][0]
                ended = bool(answer) and answer[-1] in eog_ids
                ids = ids + answer + server.tokenize(follow_up(i, ended))
            out.append(server.stream_turn(ids, max_tokens))
        return out

    results, wall = run_clients(sessions, client)
    ttft = [t[1] for r in results for t in r]
    itl = [x for r in results for t in r for x in t[2]]
    generated = sum(len(t[0]) for r in results for t in r)
    return {"sessions": sessions, "turns": sessions * turns, "generated_tokens": generated,
            "wall_s": wall, "tokens_per_s": generated / wall,
            "ttft_p50_s": quantile(ttft, 0.5), "ttft_p99_s": quantile(ttft, 0.99),
            "itl_p50_s": quantile(itl, 0.5), "itl_p99_s": quantile(itl, 0.99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="llama-server binary")
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--sessions", default="1,2,4,8,16")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max_tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx_per_slot", type=int, default=2048)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    counts = [int(n) for n in a.sessions.split(",") if n]
    runs = []
    for n in counts:
        print(f"[llama-server] {n} session(s): starting --parallel {n}", file=sys.stderr)
        server = Server(a.server, a.model, a.threads, n, a.ctx_per_slot)
        try:
            # The end-of-generation ids, as the server's tokenizer has them.
            eog = set(server.tokenize("<|im_end|>")) | set(server.tokenize("<|endoftext|>"))
            run_sessions(server, 1, a.turns, a.max_tokens, eog)  # warm-up, not counted
            r = run_sessions(server, n, a.turns, a.max_tokens, eog)
        finally:
            server.stop()
        print(f"[llama-server] {n} session(s): {r['turns']} turns, {r['generated_tokens']} "
              f"tokens in {r['wall_s']:.2f} s", file=sys.stderr)
        runs.append(r)
    print(f"\nllama-server --parallel N --cont-batching, {a.threads} threads: sessions x "
          f"{a.turns} turns, max_tokens {a.max_tokens}, greedy")
    print("| sessions | turns | tokens | wall s | tokens/s | ÷ 1st | TTFT p50 s | TTFT p99 s | "
          "ITL p50 s | ITL p99 s |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        r["tokens_per_s_ratio"] = r["tokens_per_s"] / runs[0]["tokens_per_s"]
        print(f"| {r['sessions']} | {r['turns']} | {r['generated_tokens']} | {r['wall_s']:.2f} | "
              f"{r['tokens_per_s']:.1f} | {r['tokens_per_s_ratio']:.2f}× | {r['ttft_p50_s']:.3f} "
              f"| {r['ttft_p99_s']:.3f} | {r['itl_p50_s']:.4f} | {r['itl_p99_s']:.4f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "threads": a.threads, "turns": a.turns,
                       "max_tokens": a.max_tokens}, f, indent=1)


if __name__ == "__main__":
    main()
