"""Python client of Glimpse's frontend API (glimpse.v1.Frontend); docs/python_client.md.

    from glimpse_client import GlimpseClient

    with GlimpseClient("127.0.0.1:7500") as client:
        session = client.session("demo", max_tokens=64)
        for piece in (turn := session.send("What is the capital of France?", tool="search")):
            print(piece, end="", flush=True)
        result = turn.result()  # TurnResult: source hot/warm/recompute, ttft_s, bytes, lease_s
        session.tool_ended(1.2)
        session.end()

The gRPC stubs are generated, not committed: run `python3 clients/python/build_protos.py` first.
"""
from glimpse_client.client import GlimpseClient, Session, Turn
from glimpse_client.errors import GlimpseError
from glimpse_client.results import SessionEnded, SessionInfo, ToolCallRecorded, TurnResult

__all__ = ["GlimpseClient", "GlimpseError", "Session", "SessionEnded", "SessionInfo",
           "ToolCallRecorded", "Turn", "TurnResult"]
