#!/usr/bin/env python3
"""An agent loop through Glimpse: a task answered over several turns, with real local tools between
them (docs/python_client.md).

The plan is fixed (a 135M model does not emit reliable tool calls), but the tools run for real and
their output goes back into the conversation: read_file summarises a file of this repository,
calculator evaluates arithmetic on what read_file found. Tool output is sent as a user message
naming the tool ("read_file returned: ..."): SmolLM2's chat template has no trained "tool" role,
and the model answers one with little more than a word (Session.send(text, role="tool") sends
one). Each turn names the tool that follows it and how long that tool took before (the lease
hint); after the tool, ToolCallEnded reports the time it really took. Per turn it prints the tier
the KV came from (recompute, hot, warm), TTFT, speed, bytes and the lease.

    glimpse up --dir /tmp/glimpse-cluster            # prints "frontend: 127.0.0.1:PORT"
    python3 clients/python/examples/agent_loop.py --frontend 127.0.0.1:PORT
"""
from __future__ import annotations

import argparse
import ast
import operator
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

try:  # an installed glimpse_client (pip install ./clients/python) ...
    import glimpse_client  # noqa: F401
except ImportError:  # ... else the one beside examples/ in a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from glimpse_client import GlimpseClient, GlimpseError, Session, TurnResult  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TASK = ("How long is this repository's README.md, and how many lines does each of its sections "
        "have on average? Work it out step by step with the tools.")


@dataclass
class ToolOutput:
    text: str                   # what goes back into the conversation
    values: Dict[str, float]    # numbers later steps use


def read_file(path: Path) -> ToolOutput:
    """Tool: a file's size, line count and '## ' sections (the first few named)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    sections = [line[3:].strip() for line in lines if line.startswith("## ")]
    text = (f"{path.name}: {len(lines)} lines, {path.stat().st_size} bytes, {len(sections)} "
            f"sections (first: {', '.join(sections[:4])})")
    return ToolOutput(text, {"lines": len(lines), "sections": len(sections)})


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"calculator: unsupported expression {ast.dump(node)}")


def calculator(expression: str) -> ToolOutput:
    """Tool: + - * / on numbers (no names, no calls)."""
    value = _eval(ast.parse(expression, mode="eval").body)
    return ToolOutput(f"{expression} = {value:.2f}", {"value": value})


class ToolTimer:
    """Remembers how long each tool took, for the next hint (mean of the past calls)."""

    def __init__(self) -> None:
        self.seconds: Dict[str, List[float]] = {}

    def expected(self, tool: str) -> Optional[float]:
        past = self.seconds.get(tool)
        return sum(past) / len(past) if past else None

    def record(self, tool: str, seconds: float) -> None:
        self.seconds.setdefault(tool, []).append(seconds)


def mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def print_turn(index: int, r: TurnResult) -> None:
    ratio = r.full_fp16_bytes / r.retained_bytes if r.retained_bytes else 0.0
    print(f"\n[turn {index} · {r.source} · reused {r.reused_tokens}, prefilled "
          f"{r.prefilled_tokens} tokens · TTFT {r.ttft_s:.3f} s · {r.tokens_per_s:.1f} tok/s · "
          f"hot KV {mib(r.retained_bytes)} vs {mib(r.full_fp16_bytes)} fp16 ({ratio:.1f}x) · "
          f"stored {mib(r.state_bytes)} · lease {r.lease_s:.3f} s ({r.lease_source}) · "
          f"{r.worker}]", flush=True)


class Agent:
    """Runs the turns and tool calls of one session, printing as it goes."""

    def __init__(self, session: Session, tool_delay_s: float) -> None:
        self.session = session
        self.tool_delay_s = tool_delay_s
        self.timer = ToolTimer()
        self.turns: List[TurnResult] = []

    def turn(self, text: str, role: str, next_tool: Optional[str]) -> TurnResult:
        """One model turn; `next_tool` is the tool the agent calls after it (the hint)."""
        expected = self.timer.expected(next_tool) if next_tool else None
        print(f"\n{role}> {text}\nassistant> ", end="", flush=True)
        turn = self.session.send(text, role=role, tool=next_tool, expected_tool_s=expected)
        for piece in turn:
            print(piece, end="", flush=True)
        result = turn.result()
        self.turns.append(result)
        print_turn(len(self.turns), result)
        return result

    def tool(self, name: str, run: Callable[[], ToolOutput]) -> ToolOutput:
        """Runs a tool (plus the simulated delay), then reports its duration."""
        start = time.monotonic()
        output = run()
        time.sleep(self.tool_delay_s)
        seconds = time.monotonic() - start
        self.timer.record(name, seconds)
        recorded = self.session.tool_ended(seconds)
        print(f"(tool {name}: {seconds:.3f} s, lease still alive: {recorded.lease_alive}) -> "
              f"{output.text}", flush=True)
        return output

    def run(self, task: str, repo: Path) -> None:
        self.turn(task, "user", next_tool="read_file")
        readme = self.tool("read_file", lambda: read_file(repo / "README.md"))
        self.turn(f"read_file returned: {readme.text}", "user", next_tool="calculator")
        lines, sections = int(readme.values["lines"]), int(readme.values["sections"])
        average = self.tool("calculator", lambda: calculator(f"{lines} / {sections}"))
        self.turn(f"calculator returned: {average.text}", "user", next_tool=None)
        self.turn("Answer the task in one sentence with both numbers.", "user", next_tool=None)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A Glimpse agent loop with local tools.")
    p.add_argument("--frontend", required=True, help="the frontend's host:port")
    p.add_argument("--token", help="bearer token (when the frontend has tenants)")
    p.add_argument("--ca", help="CA certificate of the frontend (TLS)")
    p.add_argument("--session", default=f"agent-{os.getpid()}", help="session id")
    p.add_argument("--policy", help="eviction method (none, snapkv, lookahead, ...)")
    p.add_argument("--budget", type=float, help="kept share of the tokens, with --policy")
    p.add_argument("--codec", help="KV page codec (fp16, int8, ...)")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens generated per turn")
    p.add_argument("--tool-delay", type=float, default=0.5,
                   help="seconds each tool also sleeps, like a slower real tool")
    p.add_argument("--repo", type=Path, default=REPO, help="the repository read_file reads")
    p.add_argument("--task", default=TASK)
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    with GlimpseClient(args.frontend, token=args.token, ca_file=args.ca) as client:
        session = client.session(args.session, policy=args.policy, budget=args.budget,
                                 codec=args.codec, max_tokens=args.max_tokens)
        try:
            with session:
                agent = Agent(session, args.tool_delay)
                agent.run(args.task, args.repo)
        except GlimpseError as e:
            print(f"\nagent_loop: {e}", file=sys.stderr)
            return 1
    sources = " -> ".join(t.source for t in agent.turns)
    print(f"\n{len(agent.turns)} turns: {sources}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
