#!/usr/bin/env python3
"""glimpse_client against a real local cluster (`glimpse up`: coordinator, cache node, decode
worker and frontend processes on loopback, the default model).

    python3 clients/python/tests/test_client.py --glimpse build/tools/cli/glimpse [-v]

(or GLIMPSE_BINARY=...). It first generates the stubs (build_protos.py), starts one cluster for all
tests and stops it with SIGTERM at the end. Registered with ctest by tests/python_client.cmake.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import List, Optional

PYTHON_DIR = Path(__file__).resolve().parent.parent
# GLIMPSE_CLIENT_INSTALLED=1: test the glimpse_client pip installed (its own stubs and PyPI's grpcio;
# tests/python_client_pip.sh), not the checkout's.
INSTALLED = os.environ.get("GLIMPSE_CLIENT_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, str(PYTHON_DIR))

try:
    import grpc  # noqa: F401
except ImportError as e:
    sys.exit(f"test_client: {e} under {sys.executable}: install python3-grpcio "
             "(tools/setup/install_deps.sh)")

if not INSTALLED:
    import build_protos  # noqa: E402

    build_protos.main(["--quiet"])

import glimpse_client  # noqa: E402
from glimpse_client import GlimpseClient, GlimpseError  # noqa: E402

if INSTALLED and Path(glimpse_client.__file__).resolve().is_relative_to(PYTHON_DIR):
    sys.exit(f"test_client: glimpse_client came from the checkout ({glimpse_client.__file__}), "
             "not from the installed package")

GLIMPSE_BINARY = os.environ.get("GLIMPSE_BINARY", "")
START_TIMEOUT_S = 90.0
Q1, Q2 = "What is the capital of France?", "Name one museum there."


class Cluster:
    """`glimpse up --dir DIR`: started, its frontend address read from stdout, stopped by SIGTERM."""

    def __init__(self, binary: str) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="glimpse-pyclient-")
        self.stderr = open(os.path.join(self.dir.name, "up.stderr"), "w+")
        self.process = subprocess.Popen([binary, "up", "--dir", self.dir.name, "--lease-ttl", "10m"],
                                        stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.address = self._await_frontend()

    def _await_frontend(self) -> str:
        found: List[str] = []

        def read() -> None:
            for line in self.process.stdout:
                if line.startswith("frontend: "):
                    found.append(line.split(":", 1)[1].strip())
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not found:
            logs = self.logs()
            self.stop()
            raise RuntimeError(f"glimpse up printed no 'frontend:' line within {START_TIMEOUT_S} s "
                               f"(exit {self.process.poll()}):\n{logs}")
        return found[0]

    def logs(self) -> str:
        self.stderr.seek(0)
        text = self.stderr.read()
        for log in sorted(Path(self.dir.name, "logs").glob("*.log")):
            text += f"\n--- {log.name} ---\n" + log.read_text(errors="replace")[-3000:]
        return text

    def stop(self) -> Optional[int]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()
        self.dir.cleanup()
        return self.process.returncode


cluster: Optional[Cluster] = None


def setUpModule() -> None:
    global cluster
    if not GLIMPSE_BINARY or not os.access(GLIMPSE_BINARY, os.X_OK):
        raise RuntimeError(f"the glimpse binary ({GLIMPSE_BINARY!r}) is needed: --glimpse PATH "
                           "or GLIMPSE_BINARY")
    cluster = Cluster(GLIMPSE_BINARY)


def tearDownModule() -> None:
    if cluster is not None:
        rc = cluster.stop()
        assert rc == 0, f"glimpse up exited {rc} on SIGTERM"


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        assert cluster is not None
        self.client = GlimpseClient(cluster.address, timeout=60)
        self.addCleanup(self.client.close)

    def test_turns_are_recomputed_then_hot_then_warm_when_replayed(self) -> None:
        session = self.client.session("py-s1", max_tokens=16)
        turn = session.send(Q1)
        pieces = list(turn)
        t1 = turn.result()
        self.assertTrue(pieces and all(pieces))
        self.assertEqual("".join(pieces), t1.text)
        self.assertEqual(t1.source, "recompute")
        self.assertGreater(t1.prefilled_tokens, 0)
        self.assertGreater(t1.ttft_s, 0)
        self.assertGreater(t1.retained_bytes, 0)
        self.assertGreater(t1.state_bytes, 0)
        self.assertTrue(t1.worker)

        t2 = session.send(Q2, tool="calculator", expected_tool_s=0.2).result()
        self.assertEqual(t2.source, "hot")
        self.assertGreater(t2.reused_tokens, 0)
        self.assertTrue(t2.text)
        info = session.info()
        self.assertEqual((info.session_id, info.turns, info.tool_name), ("py-s1", 2, "calculator"))
        recorded = session.tool_ended(0.2)
        self.assertEqual(recorded.tool_name, "calculator")
        self.assertAlmostEqual(recorded.recorded_s, 0.2)
        self.assertEqual(session.end().turns, 2)

        # The same conversation under a new session finds the stored state (content-addressed).
        replay = self.client.session("py-s2", max_tokens=16)
        replay.add_message("user", Q1)
        replay.add_message("assistant", t1.text)
        t3 = replay.send(Q2).result()
        self.assertEqual(t3.source, "warm")
        self.assertEqual(t3.reused_tokens, t2.reused_tokens)
        self.assertEqual(t3.text, t2.text)  # greedy, same state
        replay.end()

    def test_token_input(self) -> None:
        session = self.client.session("py-tokens", max_tokens=8)
        first = session.send_tokens([1, 504, 3575, 282, 4649, 314]).result()
        self.assertEqual(first.source, "recompute")
        self.assertTrue(first.token_ids)
        second = session.send_tokens([30]).result()
        self.assertEqual(second.source, "hot")
        self.assertGreater(second.reused_tokens, 0)
        with self.assertRaises(ValueError):
            session.send(Q1)
        session.end()

    def test_bad_budget_is_invalid_argument_naming_the_field(self) -> None:
        session = self.client.session("py-bad", policy="snapkv", budget=2.0)
        with self.assertRaises(GlimpseError) as caught:
            session.send(Q1).result()
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("budget_ratio", caught.exception.message)
        self.assertEqual(session.messages, [])  # a failed turn leaves the conversation as it was

    def test_decode_budget_cuts_a_long_answer_and_says_how_much(self) -> None:
        session = self.client.session("py-decode", policy="streamingllm", budget=1.0,
                                      max_tokens=48, decode_budget=40, decode_interval=8)
        r = session.send("Write a long poem about the sea.").result()
        self.assertEqual(len(r.token_ids), 48)  # greedy: the poem is longer than the limit
        self.assertGreater(r.decode_evicted, 0)
        bad = self.client.session("py-decode-bad", decode_budget=64)
        with self.assertRaises(GlimpseError) as caught:
            bad.send(Q1).result()
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("decode_budget_tokens", caught.exception.message)

    def test_a_cancelled_turn_raises_and_leaves_the_session_usable(self) -> None:
        with self.client.session("py-cancel", max_tokens=64) as session:
            turn = session.send(Q1)
            next(iter(turn))  # the first piece arrived: the turn is running
            turn.cancel()
            with self.assertRaises(GlimpseError) as caught:
                turn.result()
            self.assertEqual(caught.exception.code, "CANCELLED")
            self.assertEqual(session.messages, [])
            self.assertTrue(session.send(Q1, max_tokens=4).result().text)
            self.assertEqual(len(session.messages), 2)

    def test_unknown_session_is_not_found(self) -> None:
        with self.assertRaises(GlimpseError) as caught:
            self.client.get_session("py-never-started")
        self.assertEqual(caught.exception.code, "NOT_FOUND")
        self.assertIn("py-never-started", caught.exception.message)

    def test_unreachable_frontend_is_unavailable(self) -> None:
        with GlimpseClient("127.0.0.1:1", timeout=5) as client:
            with self.assertRaises(GlimpseError) as caught:
                client.get_session("x")
        self.assertEqual(caught.exception.code, "UNAVAILABLE")

    def test_example_agent_loop_runs(self) -> None:
        assert cluster is not None
        example = PYTHON_DIR / "examples" / "agent_loop.py"
        run = subprocess.run(
            [sys.executable, str(example), "--frontend", cluster.address, "--session", "py-agent",
             "--max-tokens", "8", "--tool-delay", "0"], capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("[turn 1 · recompute", run.stdout)
        self.assertIn("(tool calculator:", run.stdout)
        self.assertIn("4 turns: recompute -> ", run.stdout)


def main() -> None:
    global GLIMPSE_BINARY
    argv = sys.argv[:]
    if "--glimpse" in argv:
        i = argv.index("--glimpse")
        GLIMPSE_BINARY = argv[i + 1]
        del argv[i:i + 2]
    start = time.monotonic()
    program = unittest.main(argv=argv, exit=False)
    print(f"test_client: {time.monotonic() - start:.1f} s", file=sys.stderr)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
