"""The one import point of the PyPI ``p4runtime`` protobuf bindings (``p4.config.v1``, ``p4.v1``).

Those bindings are generated in the old descriptor style, which protobuf >= 4 accepts only from its pure-Python
backend; so that backend is selected here, before ``google.protobuf`` is first imported, and checked.
"""

from __future__ import annotations

import os

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

from google.protobuf import json_format, text_format  # noqa: E402  (the backend must be chosen first)
from google.protobuf.internal import api_implementation  # noqa: E402

if api_implementation.Type() != "python":
    raise ImportError("the p4runtime bindings need protobuf's pure-Python backend: import p4.p4runtime_proto "
                      "before google.protobuf, or set PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python")

from p4.config.v1 import p4info_pb2, p4types_pb2  # noqa: E402

__all__ = ["json_format", "p4info_pb2", "p4types_pb2", "text_format"]
