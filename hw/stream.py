"""AXI-Stream as an Amaranth signature: tdata/tkeep/tlast/tvalid/tready and an optional tuser.

Verilog ports come out as ``<name>__tdata`` etc., so cocotbext-axi binds them with the prefix ``<name>_``.
"""

from __future__ import annotations

from amaranth.hdl import Cat
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class AxiStream(wiring.Signature):
    """AXI4-Stream source-side signature: ``Out(AxiStream(w))`` on a producer, ``In(...)`` on a consumer."""

    def __init__(self, data_width: int, user_width: int = 0) -> None:
        if data_width <= 0 or data_width % 8:
            raise ValueError(f"data_width must be a positive multiple of 8, not {data_width}")
        if user_width < 0:
            raise ValueError(f"user_width must be >= 0, not {user_width}")
        self.data_width = data_width
        self.user_width = user_width
        members = {
            "tdata": Out(data_width),
            "tkeep": Out(data_width // 8),
            "tlast": Out(1),
            "tvalid": Out(1),
            "tready": In(1),
        }
        if user_width:
            members["tuser"] = Out(user_width)
        super().__init__(members)

    @property
    def bytes_per_beat(self) -> int:
        return self.data_width // 8

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, AxiStream) and other.data_width == self.data_width
                and other.user_width == self.user_width)

    def __hash__(self) -> int:
        return hash((AxiStream, self.data_width, self.user_width))

    def __repr__(self) -> str:
        return f"AxiStream({self.data_width}, user_width={self.user_width})"


def keep_for_remaining(remaining_bytes, bytes_per_beat: int):
    """tkeep for a beat when ``remaining_bytes`` (a Value) of the frame are still to go: lane i iff i < rem."""
    return Cat(*(remaining_bytes > lane for lane in range(bytes_per_beat)))
