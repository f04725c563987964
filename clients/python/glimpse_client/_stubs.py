"""The generated gRPC stubs (glimpse.v1), imported from where build_protos.py put them.

protoc's modules import each other as `from glimpse.v1 import ...`, so the directory holding the
generated `glimpse` package (glimpse_client/_proto) is appended to sys.path first.
"""
from __future__ import annotations

import os
import sys

_PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_proto")

if not os.path.isfile(os.path.join(_PROTO_ROOT, "glimpse", "v1", "frontend_pb2_grpc.py")):
    raise ImportError(
        f"glimpse_client: the generated gRPC stubs are missing under {_PROTO_ROOT}; "
        "run `python3 clients/python/build_protos.py` (docs/python_client.md)")
if _PROTO_ROOT not in sys.path:
    sys.path.append(_PROTO_ROOT)

from glimpse.v1 import session_pb2  # noqa: E402
from glimpse.v1 import turn_pb2  # noqa: E402
from glimpse.v1 import frontend_pb2  # noqa: E402
from glimpse.v1 import frontend_pb2_grpc  # noqa: E402
from glimpse.v1 import model_pb2  # noqa: E402

__all__ = ["session_pb2", "turn_pb2", "frontend_pb2", "frontend_pb2_grpc",
           "model_pb2"]
