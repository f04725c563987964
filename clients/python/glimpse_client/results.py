"""Plain results of Glimpse calls (frozen dataclasses), built from the frontend's messages.

Durations are seconds (the wire carries integer milliseconds), sizes bytes. A turn's source is the
tier its KV came from: "hot" (the decode worker still held it), "warm" (loaded from a cache node)
or "recompute" (nothing stored; every token prefilled).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from glimpse_client._stubs import session_pb2, turn_pb2, frontend_pb2

_SOURCES = {
    turn_pb2.STATE_SOURCE_HOT: "hot",
    turn_pb2.STATE_SOURCE_WARM: "warm",
    turn_pb2.STATE_SOURCE_RECOMPUTE: "recompute",
    turn_pb2.STATE_SOURCE_PREFILL_WORKER: "prefill_worker",
}
_TIERS = {
    session_pb2.SESSION_TIER_ACTIVE: "active",
    session_pb2.SESSION_TIER_LEASED: "leased",
    session_pb2.SESSION_TIER_WARM: "warm",
}


@dataclass(frozen=True)
class TurnResult:
    """One finished turn: the answer, where its KV came from, and what it cost."""

    text: str                 # the generated text
    token_ids: Tuple[int, ...]  # the generated token ids
    finish_reason: str        # "stop" (end of sequence) or "length" (max_tokens reached)
    source: str               # "hot" | "warm" | "recompute" | "prefill_worker"
    reused_tokens: int        # prefix tokens whose KV was reused (hot copy or cache node)
    prefilled_tokens: int     # tokens run through the model before decoding
    ttft_s: float             # request sent -> first text piece, measured by this client
    server_ttft_s: float      # request received -> first token, measured by the decode worker
    tokens_per_s: float       # decode speed
    retained_bytes: int       # the hot KV after eviction, encoded
    full_fp16_bytes: int      # what the unevicted fp16 KV of kv_tokens would be
    state_bytes: int          # encoded pages written to the cache node (kept and evicted)
    kv_tokens: int            # tokens the session's state now summarises
    decode_evicted: int       # KV entries decode-time eviction took out while generating
    lease_s: float            # how long the KV stays hot on its worker (0: demoted now)
    lease_source: str         # where the lease came from: "estimator", "hint", "default", ...
    reuse_probability: float  # the coordinator's estimate that the next turn comes within lease_s
    worker: str               # the decode worker that ran the turn
    queue_wait_s: float       # admission wait
    prefill_source: str = ""  # with source "prefill_worker": where it started, "warm" | "recompute"
    prefill_reused_tokens: int = 0  # ... and the prefix tokens it loaded from a cache node


@dataclass(frozen=True)
class SessionInfo:
    """The coordinator's record of a session (GetSession)."""

    session_id: str
    tier: str                 # "active" | "leased" | "warm" ("" if unknown)
    decode_worker_id: str     # where it is or was hot; "" if never routed
    kv_tokens: int
    reserved_bytes: int
    turns: int
    tool_name: str            # the tool named by the last turn's hint
    lease_s: float
    lease_expires_unix_s: Optional[float]  # None without a lease


@dataclass(frozen=True)
class ToolCallRecorded:
    """What ToolCallEnded recorded."""

    tool_name: str
    recorded_s: float
    lease_alive: bool  # the session's hot copy was still pinned when the tool ended


@dataclass(frozen=True)
class SessionEnded:
    """What EndSession released."""

    turns: int
    released_bytes: int


def source_name(source: int) -> str:
    """"hot" | "warm" | "recompute" | "prefill_worker" for a StateSource value ("unspecified"
    otherwise)."""
    return _SOURCES.get(source, "unspecified")


def session_info(info: session_pb2.SessionInfo) -> SessionInfo:
    return SessionInfo(
        session_id=info.session_id,
        tier=_TIERS.get(info.tier, ""),
        decode_worker_id=info.decode_worker_id,
        kv_tokens=info.kv_tokens,
        reserved_bytes=info.reserved_bytes,
        turns=info.turns,
        tool_name=info.tool_name,
        lease_s=info.ttl_ms / 1000.0,
        lease_expires_unix_s=info.lease_expires_unix_ms / 1000.0
        if info.lease_expires_unix_ms else None,
    )


def tool_call_recorded(resp: session_pb2.ToolCallEndedResponse) -> ToolCallRecorded:
    return ToolCallRecorded(tool_name=resp.tool_name, recorded_s=resp.recorded_duration_ms / 1000.0,
                            lease_alive=resp.lease_alive)


def session_ended(resp: session_pb2.EndSessionResponse) -> SessionEnded:
    return SessionEnded(turns=resp.turns, released_bytes=resp.released_bytes)


def turn_result(text: str, token_ids: Tuple[int, ...], ttft_s: float,
                started: frontend_pb2.GenerateEvent, done: turn_pb2.TurnDone,
                lease: frontend_pb2.TurnLease) -> TurnResult:
    """Assembles a TurnResult from the started event (with its worker), done and lease."""
    return TurnResult(
        text=text,
        token_ids=token_ids,
        finish_reason=done.finish_reason,
        source=source_name(started.started.source),
        reused_tokens=started.started.reused_tokens,
        prefilled_tokens=started.started.prefilled_tokens,
        ttft_s=ttft_s,
        server_ttft_s=done.ttft_seconds,
        tokens_per_s=done.decode_tokens_per_second,
        retained_bytes=done.retained_bytes,
        full_fp16_bytes=done.full_fp16_bytes,
        state_bytes=done.state_bytes,
        kv_tokens=done.kv_tokens,
        decode_evicted=done.decode_evicted_entries,
        lease_s=lease.ttl_ms / 1000.0,
        lease_source=lease.ttl_source,
        reuse_probability=lease.reuse_probability,
        worker=started.decode_worker_id,
        queue_wait_s=started.queue_wait_ms / 1000.0,
        prefill_source=source_name(started.prefill.source) if started.HasField("prefill") else "",
        prefill_reused_tokens=started.prefill.reused_tokens,
    )
