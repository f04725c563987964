"""GlimpseClient, Session and Turn: the glimpse.v1.Frontend API for Python callers.

A GlimpseClient owns one gRPC channel to a frontend (insecure, or TLS with `ca_file`; a bearer
`token` when the frontend has tenants). A Session is one conversation: it keeps the chat messages
(or token ids) sent so far and resends the whole conversation each turn, as the API requires; the
frontend finds the longest stored prefix, so only the new tokens are prefilled. Tool hints
(`tool`, `expected_tool_s`) name the tool the agent calls *after* the turn, so the coordinator can
decide how long to keep the session's KV hot; `tool_ended` reports how long it took.

The conversation only grows when a turn succeeds: a failed or cancelled turn leaves the session as
it was, and the same `send` can be retried. Not thread-safe: use one Session from one thread (the
GlimpseClient itself may be shared). Every failed call raises GlimpseError.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import grpc

from glimpse_client import results
from glimpse_client._stubs import (session_pb2, turn_pb2, frontend_pb2,
                                   frontend_pb2_grpc, model_pb2)
from glimpse_client.errors import GlimpseError, from_rpc_error
from glimpse_client.results import SessionEnded, SessionInfo, ToolCallRecorded, TurnResult

Metadata = Tuple[Tuple[str, str], ...]


class GlimpseClient:
    """A connection to one glimpse-frontend.

    address: "host:port". token: bearer token (sent as `authorization: Bearer <token>`).
    ca_file: PEM CA of the frontend's certificate: TLS when set, plaintext otherwise; cert_file and
    key_file add a client certificate (mutual TLS). timeout: deadline in seconds of each call (a
    whole Generate stream included); None for none.
    """

    def __init__(self, address: str, token: Optional[str] = None, ca_file: Optional[str] = None,
                 timeout: Optional[float] = 120.0, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata: Metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._channel = _make_channel(address, ca_file, cert_file, key_file)
        self.stub = frontend_pb2_grpc.FrontendStub(self._channel)

    def session(self, session_id: str, policy: Optional[str] = None,
                budget: Optional[float] = None, codec: Optional[str] = None,
                max_tokens: int = 0, temperature: float = 0.0, top_k: int = 0,
                top_p: float = 0.0, seed: int = 0, decode_budget: int = 0,
                decode_interval: int = 0) -> "Session":
        """A conversation under `session_id` ([A-Za-z0-9._:-]{1,128}; a new id starts a session).

        policy/budget/codec: the eviction policy ("snapkv", 0.2, "int8"); all None: the frontend's
        default. decode_budget > 0: while generating, every decode_interval tokens (0: 32) the
        policy's method cuts each (layer, kv-head) back to decode_budget entries (a long answer
        then holds a bounded KV). max_tokens 0: the frontend's default. temperature 0 is greedy;
        top_k 0 and top_p 0 are off. Nothing is sent until the first turn.
        """
        sampling = model_pb2.SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p,
                                            seed=seed, max_tokens=max_tokens)
        eviction = None
        if policy is not None or budget is not None or codec is not None or decode_budget:
            eviction = turn_pb2.EvictionPolicy(method=policy or "",
                                                budget_ratio=budget or 0.0,
                                                codec=codec or "",
                                                decode_budget_tokens=decode_budget,
                                                decode_interval=decode_interval)
        return Session(self, session_id, sampling, eviction)

    def get_session(self, session_id: str) -> SessionInfo:
        """The coordinator's record of the session; NOT_FOUND if the caller has none by that id."""
        resp = self.call(self.stub.GetSession, session_pb2.GetSessionRequest(
            session_id=session_id))
        return results.session_info(resp.session)

    def call(self, method: Callable, request):
        """Runs a unary Frontend method with this client's deadline and token."""
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def stream(self, request: frontend_pb2.GenerateRequest):
        """Starts a Generate stream (an iterator of GenerateEvent that is also a grpc.Call)."""
        return self.stub.Generate(request, timeout=self.timeout, metadata=self._metadata)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "GlimpseClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _make_channel(address: str, ca_file: Optional[str], cert_file: Optional[str],
                  key_file: Optional[str]) -> grpc.Channel:
    if ca_file is None:
        if cert_file or key_file:
            raise ValueError("cert_file/key_file need ca_file (TLS)")
        return grpc.insecure_channel(address)
    creds = grpc.ssl_channel_credentials(root_certificates=_read(ca_file),
                                         private_key=_read(key_file),
                                         certificate_chain=_read(cert_file))
    return grpc.secure_channel(address, creds)


def _read(path: Optional[str]) -> Optional[bytes]:
    return Path(path).read_bytes() if path else None


class Turn:
    """One turn in flight. Iterate it for the text pieces as they stream; `result()` waits for the
    end (reading what was not iterated) and returns the TurnResult, or raises GlimpseError."""

    def __init__(self, call: Iterator[frontend_pb2.GenerateEvent],
                 on_success: Callable[[TurnResult], None]) -> None:
        self._call = call
        self._on_success = on_success
        self._t0 = time.monotonic()
        self._ttft_s = 0.0
        self._pieces: List[str] = []
        self._ids: List[int] = []
        self._started = frontend_pb2.GenerateEvent()
        self._done: Optional[turn_pb2.TurnDone] = None
        self._lease = frontend_pb2.TurnLease()
        self._result: Optional[TurnResult] = None
        self._error: Optional[GlimpseError] = None

    def __iter__(self) -> Iterator[str]:
        while True:
            piece = self._advance()
            if piece is None:
                return
            if piece:
                yield piece

    @property
    def finished(self) -> bool:
        """The stream is over (successfully or not)."""
        return self._result is not None or self._error is not None

    def result(self) -> TurnResult:
        while self._advance() is not None:
            pass
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        """Cancels the turn (the frontend ends it as failed); result() then raises CANCELLED."""
        self._call.cancel()

    def _advance(self) -> Optional[str]:
        """Reads one event: its text ("" for other events), None once the turn is over."""
        if self.finished:
            return None
        try:
            event = next(self._call)
        except StopIteration:
            self._finish()
            return None
        except grpc.RpcError as e:
            self._error = from_rpc_error(e)
            return None
        return self._take(event)

    def _take(self, event: frontend_pb2.GenerateEvent) -> str:
        kind = event.WhichOneof("event")
        if kind == "started":
            self._started = event
        elif kind == "done":
            self._done = event.done
        elif kind == "lease":
            self._lease = event.lease
        elif kind == "tokens":
            if not self._pieces:
                self._ttft_s = time.monotonic() - self._t0
            self._pieces.append(event.tokens.text)
            self._ids.extend(event.tokens.token_ids)
            return event.tokens.text
        return ""

    def _finish(self) -> None:
        if self._done is None:
            self._error = GlimpseError("UNKNOWN", "the Generate stream ended without a done event")
            return
        self._result = results.turn_result("".join(self._pieces), tuple(self._ids), self._ttft_s,
                                           self._started, self._done, self._lease)
        self._on_success(self._result)


class Session:
    """One conversation (see the module comment). Made by GlimpseClient.session()."""

    def __init__(self, client: GlimpseClient, session_id: str,
                 sampling: model_pb2.SamplingParams,
                 policy: Optional[turn_pb2.EvictionPolicy]) -> None:
        self.client = client
        self.session_id = session_id
        self.sampling = sampling
        self.policy = policy
        self.messages: List[model_pb2.ChatMessage] = []  # the chat so far (chat input)
        self.tokens: List[int] = []  # the conversation so far (token input)
        self._pending: Optional[Turn] = None

    def add_message(self, role: str, content: str) -> None:
        """Appends a message without generating (e.g. a tool's output, role "tool"); it is sent
        with the next turn."""
        self._check_mode(chat=True)
        self.messages.append(model_pb2.ChatMessage(role=role, content=content))

    def send(self, text: str, role: str = "user", tool: Optional[str] = None,
             expected_tool_s: Optional[float] = None, max_tokens: Optional[int] = None) -> Turn:
        """Starts a turn: `text` as a `role` message after the conversation so far, then the
        assistant's answer. tool / expected_tool_s: the tool the agent calls after this turn and
        how long it should take. Iterate the Turn for text, or call .result()."""
        self._check_mode(chat=True)
        message = model_pb2.ChatMessage(role=role, content=text)
        conversation = frontend_pb2.Conversation(messages=[*self.messages, message])

        def commit(result: TurnResult) -> None:
            self.messages += [message, model_pb2.ChatMessage(role="assistant", content=result.text)]

        return self._start(self._request(tool, expected_tool_s, max_tokens, chat=conversation),
                           commit)

    def send_tokens(self, token_ids: Sequence[int], tool: Optional[str] = None,
                    expected_tool_s: Optional[float] = None,
                    max_tokens: Optional[int] = None) -> Turn:
        """Like send, with raw token ids appended to the conversation's ids (the first turn's ids
        are the whole prompt, template and all); the generated ids are appended on success."""
        self._check_mode(chat=False)
        ids = [*self.tokens, *token_ids]

        def commit(result: TurnResult) -> None:
            self.tokens = ids + list(result.token_ids)

        return self._start(self._request(tool, expected_tool_s, max_tokens,
                                         tokens=frontend_pb2.TokenIds(ids=ids)), commit)

    def tool_ended(self, seconds: float) -> ToolCallRecorded:
        """Reports that the tool named by the last turn's hint took `seconds`."""
        req = frontend_pb2.ToolCallEndedFrontendRequest(session_id=self.session_id,
                                                        observed_duration_ms=round(seconds * 1000))
        return results.tool_call_recorded(self.client.call(self.client.stub.ToolCallEnded, req))

    def info(self) -> SessionInfo:
        return self.client.get_session(self.session_id)

    def end(self) -> SessionEnded:
        """Ends the session: its hot KV is released (the stored states stay on the cache nodes)."""
        self._drain()
        req = session_pb2.EndSessionRequest(session_id=self.session_id)
        return results.session_ended(self.client.call(self.client.stub.EndSession, req))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.end()
        except GlimpseError as e:
            # NOT_FOUND: never started. An error in the block wins over one from end().
            if exc_type is None and e.code != "NOT_FOUND":
                raise

    def _request(self, tool: Optional[str], expected_tool_s: Optional[float],
                 max_tokens: Optional[int], **input_) -> frontend_pb2.GenerateRequest:
        sampling = model_pb2.SamplingParams()
        sampling.CopyFrom(self.sampling)
        if max_tokens is not None:
            sampling.max_tokens = max_tokens
        return frontend_pb2.GenerateRequest(
            session_id=self.session_id, sampling=sampling, policy=self.policy,
            tool_name=tool or "",
            expected_tool_ms=round(expected_tool_s * 1000) if expected_tool_s else 0, **input_)

    def _start(self, request: frontend_pb2.GenerateRequest,
               commit: Callable[[TurnResult], None]) -> Turn:
        self._drain()
        try:
            self._pending = Turn(self.client.stream(request), commit)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return self._pending

    def _drain(self) -> None:
        """Finishes the previous turn if the caller left it unfinished (its error is raised)."""
        pending, self._pending = self._pending, None
        if pending is not None and not pending.finished:
            pending.result()

    def _check_mode(self, chat: bool) -> None:
        if (self.tokens if chat else self.messages):
            raise ValueError(f"session {self.session_id!r} already uses "
                             f"{'token' if chat else 'chat'} input; one session uses one kind")
