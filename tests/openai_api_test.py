#!/usr/bin/env python3
"""The frontend's OpenAI-compatible API (docs/openai_api.md) through the official `openai` package
and curl, against a real local cluster (`glimpse up`: coordinator, cache node, workers and
frontend processes on loopback, the default model).

    tests/openai_api.sh WORK_DIR GLIMPSE_BINARY   (a venv with PyPI's openai, then this file)
    python tests/openai_api_test.py --glimpse build/tools/cli/glimpse [-v]

Registered with ctest by tests/openai_api.cmake. Greedy sampling (temperature 0) makes replies
reproducible, so a replayed conversation can be compared with the turn it replays.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any, Dict, List, Optional

import openai

GLIMPSE_BINARY = os.environ.get("GLIMPSE_BINARY", "")
START_TIMEOUT_S = 120.0
MODEL = "SmolLM2-135M-Instruct.Q4_1"
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}]
# A conversation that already holds one tool call and its result: the model sees the format.
AGENT_START: List[Dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Berlin?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_0", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Berlin\"}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "12 C, rain"},
    {"role": "assistant", "content": "It is 12 C and raining in Berlin."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


class Cluster:
    """`glimpse up --dir DIR`: started, its OpenAI URL read from stdout, stopped by SIGTERM."""

    def __init__(self, binary: str) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="glimpse-openai-")
        self.stderr = open(os.path.join(self.dir.name, "up.stderr"), "w+")
        self.process = subprocess.Popen(
            [binary, "up", "--dir", self.dir.name, "--lease-ttl", "10m"],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.url = self._await_line("openai: ")

    def _await_line(self, prefix: str) -> str:
        found: List[str] = []

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                if line.startswith(prefix):
                    found.append(line[len(prefix):].strip())
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not found:
            self.stderr.seek(0)
            logs = self.stderr.read()
            self.stop()
            raise RuntimeError(f"glimpse up printed no '{prefix}' line within {START_TIMEOUT_S} s "
                               f"(exit {self.process.poll()}):\n{logs}")
        return found[0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()
        self.dir.cleanup()


cluster: Optional[Cluster] = None


def glimpse(response: Any) -> Dict[str, Any]:
    """The response's "glimpse" extension (the openai package keeps unknown fields)."""
    extra = response.model_extra or {}
    assert "glimpse" in extra, f"no glimpse extension in {response}"
    return extra["glimpse"]


def run_tool(call: Any) -> str:
    args = json.loads(call.function.arguments or "{}")
    return f"{call.function.name}({json.dumps(args, sort_keys=True)}) = 18 C, sunny"


class OpenAiApiTest(unittest.TestCase):
    def setUp(self) -> None:
        assert cluster is not None
        self.client = openai.OpenAI(base_url=cluster.url, api_key="unused", timeout=120,
                                    max_retries=0)
        self.addCleanup(self.client.close)

    def chat(self, messages: List[Dict[str, Any]], session: Optional[str] = None,
             **kwargs: Any) -> Any:
        headers = {"X-Glimpse-Session": session} if session else {}
        return self.client.chat.completions.create(
            model=MODEL, messages=messages, temperature=0, max_tokens=kwargs.pop("max_tokens", 24),
            extra_headers=headers, **kwargs)

    def test_models_lists_the_served_model(self) -> None:
        self.assertEqual([m.id for m in self.client.models.list()], [MODEL])

    def test_an_agent_loop_with_tool_calls_runs_hot_then_replays_warm(self) -> None:
        history = [dict(m) for m in AGENT_START]
        sources, requests, replies = [], [], []
        for _ in range(3):
            requests.append([dict(m) for m in history])
            response = self.chat(history, session="oa-agent", tools=TOOLS, max_tokens=48)
            choice = response.choices[0]
            sources.append(glimpse(response)["source"])
            replies.append(choice.message)
            self.assertGreater(response.usage.prompt_tokens, 0)
            self.assertEqual(response.usage.total_tokens,
                             response.usage.prompt_tokens + response.usage.completion_tokens)
            history.append(choice.message.model_dump(exclude_none=True))
            if choice.message.tool_calls:
                self.assertEqual(choice.finish_reason, "tool_calls")
                self.assertIsNone(choice.message.content)
                for call in choice.message.tool_calls:
                    history.append({"role": "tool", "tool_call_id": call.id,
                                    "content": run_tool(call)})
            else:
                history.append({"role": "user", "content": "And in Rome?"})
        # The first turn computes (on the prefill worker: its prompt is long); every later one
        # finds the session's KV still hot on its decode worker, tool-call replies included.
        self.assertIn(sources[0], ("recompute", "prefill_worker"))
        self.assertEqual(sources[1:], ["hot", "hot"])
        self.assertTrue(any(r.tool_calls for r in replies),
                        "the model made no tool call in three turns")

        # The same conversation under a new session finds the stored state (content-addressed;
        # on the prefill worker when the coordinator sends its many new tokens there) and,
        # greedy from the same KV, replies the same.
        replay = self.chat(requests[1], session="oa-agent-replay", tools=TOOLS, max_tokens=48)
        ext = glimpse(replay)
        self.assertEqual(ext.get("prefill_source", ext["source"]), "warm", ext)
        self.assertGreater(ext["reused_tokens"], 0)
        self.assertEqual(replay.choices[0].message.model_dump(exclude_none=True),
                         replies[1].model_dump(exclude_none=True))

    def test_streaming_gives_the_text_of_the_same_request_unstreamed(self) -> None:
        messages = [{"role": "user", "content": "Name three colours."}]
        whole = self.chat(messages)  # a one-off session: no session named
        self.assertNotIn("session_id", glimpse(whole))
        text, finish, usage, extension = "", None, None, None
        stream = self.chat(messages, stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            if not chunk.choices:
                continue
            text += chunk.choices[0].delta.content or ""
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
                extension = (chunk.model_extra or {}).get("glimpse")
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(finish, whole.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)
        self.assertEqual(usage.prompt_tokens, whole.usage.prompt_tokens)
        self.assertIsNotNone(extension)

    def test_completions_stop_before_a_stop_string(self) -> None:
        prompt = "The three primary colours are"
        full = self.client.completions.create(model=MODEL, prompt=prompt, temperature=0,
                                              max_tokens=16)
        text = full.choices[0].text
        self.assertEqual(full.object, "text_completion")
        self.assertGreater(len(text), 6, text)
        stop = text[len(text) // 2:len(text) // 2 + 2]
        cut = self.client.completions.create(model=MODEL, prompt=prompt, temperature=0,
                                             max_tokens=16, stop=[stop])
        self.assertEqual(cut.choices[0].text, text[:text.index(stop)])
        self.assertEqual(cut.choices[0].finish_reason, "stop")

    def test_seeded_sampling_repeats(self) -> None:
        messages = [{"role": "user", "content": "Tell me a word."}]
        a = self.client.chat.completions.create(model=MODEL, messages=messages, temperature=1.0,
                                                seed=42, max_tokens=12)
        b = self.client.chat.completions.create(model=MODEL, messages=messages, temperature=1.0,
                                                seed=42, max_tokens=12)
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)

    def test_errors_come_in_openais_shape(self) -> None:
        with self.assertRaises(openai.NotFoundError) as unknown:
            self.client.chat.completions.create(model="gpt-4o", messages=[
                {"role": "user", "content": "Hi"}])
        self.assertEqual(unknown.exception.code, "model_not_found")
        with self.assertRaises(openai.BadRequestError) as hot:
            self.client.chat.completions.create(model=MODEL, temperature=5, messages=[
                {"role": "user", "content": "Hi"}])
        self.assertIn("temperature", str(hot.exception))
        with self.assertRaises(openai.BadRequestError) as session:
            self.chat([{"role": "user", "content": "Hi"}], session="bad session id!")
        self.assertIn("session_id", str(session.exception))

    def test_curl_streams_and_is_refused_an_oversized_body(self) -> None:
        assert cluster is not None
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                           "temperature": 0, "stream": True})
        out = subprocess.run(["curl", "-sS", "-N", f"{cluster.url}/chat/completions", "-d", body],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        events = [line[len("data: "):] for line in out.splitlines() if line.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))

        big = json.dumps({"messages": [{"role": "user", "content": "x" * (5 << 20)}]})
        refused = subprocess.run(
            ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", f"{cluster.url}/chat/completions",
             "--data-binary", "@-"], input=big, capture_output=True, text=True, timeout=120)
        body_text, code = refused.stdout.rsplit("\n", 1)
        self.assertEqual(code, "413")
        self.assertIn("over", json.loads(body_text)["error"]["message"])


def main() -> None:
    global cluster, GLIMPSE_BINARY
    if "--glimpse" in sys.argv:
        i = sys.argv.index("--glimpse")
        GLIMPSE_BINARY = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    if not GLIMPSE_BINARY:
        sys.exit("usage: openai_api_test.py --glimpse PATH/TO/glimpse [unittest args]")
    cluster = Cluster(GLIMPSE_BINARY)
    try:
        result = unittest.main(exit=False).result
    finally:
        cluster.stop()
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
