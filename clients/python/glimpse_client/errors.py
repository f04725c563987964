"""GlimpseError: the one exception the client raises for a failed call.

Every gRPC failure (a status from the frontend, or the channel's own: UNAVAILABLE when nothing
listens, DEADLINE_EXCEEDED past the client's timeout) becomes a GlimpseError carrying the status
code's name and the server's message, e.g. `INVALID_ARGUMENT: policy.budget_ratio = 2 is outside
(0, 1] for method "snapkv"`. Misuse of the client itself (mixing chat and token input in one
session) raises ValueError instead.
"""
from __future__ import annotations

import grpc


class GlimpseError(Exception):
    """A failed Glimpse call: `code` is the gRPC status code name, `message` the server's text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def from_rpc_error(error: grpc.RpcError) -> GlimpseError:
    """The GlimpseError for a grpc.RpcError (a grpc.Call: code() and details())."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    return GlimpseError(name, details or str(error))
