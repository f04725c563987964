#!/usr/bin/env python3
"""What the OpenAI HTTP API costs against the gRPC API it translates, on one cluster in one run.

Starts `glimpse up`, then for each count N in --sessions runs N concurrent multi-turn chat sessions
twice, alternating --rounds times: through the gRPC API (glimpse_client, the Python client) and
through /v1/chat/completions with "stream": true (http.client, server-sent events). Both send the
same chat messages (a story request, then follow-ups that append the answer), greedy, --max_tokens
per turn, each session under its own id so later turns are hot. Prints generated tokens/s and TTFT
p50 per path and the ratio HTTP ÷ gRPC (medians over rounds); progress on stderr.

    python3 bench/openai_api_bench.py --glimpse build/tools/cli/glimpse [--sessions 1,4]

Runs under Debian's python3 (python3-grpcio for the gRPC client).
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python"))
import build_protos  # noqa: E402

build_protos.main(["--quiet"])
from load_clients import run_clients  # noqa: E402
from glimpse_client import GlimpseClient  # noqa: E402

TOPICS = ["a lighthouse keeper", "a lost robot", "a mountain village", "a river pilot",
          "a clockmaker", "a desert station", "a night train", "a library cat"]


def question(k, turn):
    if turn == 0:
        return f"Write a long, detailed story about {TOPICS[k % len(TOPICS)]}."
    return f"Follow-up {turn}: continue the story with one more scene."


def quantile(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


class Cluster:
    def __init__(self, binary):
        self.dir = tempfile.TemporaryDirectory(prefix="glimpse-openai-bench-")
        self.proc = subprocess.Popen([binary, "up", "--dir", self.dir.name, "--lease-ttl", "10m"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.grpc = self.url = None
        for line in self.proc.stdout:
            if line.startswith("frontend: "):
                self.grpc = line.split(": ", 1)[1].strip()
            if line.startswith("openai: "):
                self.url = line.split(": ", 1)[1].strip()
                break
        if not (self.grpc and self.url):
            raise RuntimeError("glimpse up printed no frontend/openai address")
        host_port = self.url.split("//", 1)[1].split("/", 1)[0]
        self.host, self.port = host_port.split(":")[0], int(host_port.split(":")[1])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.dir.cleanup()


def grpc_session(cluster, sid, k, turns, max_tokens):
    """[(tokens, ttft s)] per turn through the gRPC API."""
    out = []
    with GlimpseClient(cluster.grpc, timeout=600) as client:
        session = client.session(sid, max_tokens=max_tokens)
        for t in range(turns):
            t0 = time.perf_counter()
            turn = session.send(question(k, t))
            ttft = None
            for _ in turn:
                if ttft is None:
                    ttft = time.perf_counter() - t0
            out.append((len(turn.result().token_ids), ttft or 0.0))
    return out


def http_session(cluster, sid, k, turns, max_tokens):
    """[(tokens, ttft s)] per turn through /v1/chat/completions, streamed."""
    out, messages = [], []
    for t in range(turns):
        messages.append({"role": "user", "content": question(k, t)})
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        conn = http.client.HTTPConnection(cluster.host, cluster.port, timeout=600)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json", "X-Glimpse-Session": sid})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
        text, ttft, tokens = "", None, 0
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices", []):
                piece = c.get("delta", {}).get("content") or ""
                if piece and ttft is None:
                    ttft = time.perf_counter() - t0
                text += piece
        conn.close()
        messages.append({"role": "assistant", "content": text})
        out.append((tokens, ttft or 0.0))
    return out


def run(cluster, path, n, turns, max_tokens, tag):
    fn = grpc_session if path == "grpc" else http_session
    results, wall = run_clients(
        n, lambda k: fn(cluster, f"{tag}-{path}-{n}-{k}", k, turns, max_tokens))
    tokens = sum(x[0] for r in results for x in r)
    return tokens / wall, quantile([x[1] for r in results for x in r], 0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glimpse", required=True)
    ap.add_argument("--sessions", default="1,4")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max_tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    cluster = Cluster(a.glimpse)
    rows = []
    try:
        run(cluster, "grpc", 1, 1, a.max_tokens, "warmup")
        for n in [int(x) for x in a.sessions.split(",") if x]:
            got = {"grpc": [], "http": []}
            for r in range(a.rounds):
                for path in ("grpc", "http") if r % 2 == 0 else ("http", "grpc"):
                    print(f"[openai bench] {n} session(s), round {r + 1}/{a.rounds}: {path}",
                          file=sys.stderr)
                    got[path].append(run(cluster, path, n, a.turns, a.max_tokens, f"r{r}"))
            med = {p: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
                   for p, v in got.items()}
            rows.append((n, med))
    finally:
        cluster.stop()
    print(f"\nOpenAI HTTP (streamed) vs gRPC on one `glimpse up` cluster: sessions x {a.turns} "
          f"turns, max_tokens {a.max_tokens}, greedy; medians of {a.rounds} alternating rounds")
    print("| sessions | gRPC tok/s | HTTP tok/s | HTTP ÷ gRPC | gRPC TTFT p50 s | "
          "HTTP TTFT p50 s |\n|---|---|---|---|---|---|")
    for n, med in rows:
        g, h = med["grpc"], med["http"]
        print(f"| {n} | {g[0]:.1f} | {h[0]:.1f} | {h[0] / g[0]:.2f}× | {g[1]:.3f} | {h[1]:.3f} |")


if __name__ == "__main__":
    main()
