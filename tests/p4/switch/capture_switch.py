"""Test helper: an ``EmbeddedSwitch`` with no ports whose transmitted frames are recorded, not sent."""

from __future__ import annotations

from p4.switch.pipeline_adapter import SwitchPipeline
from p4.switch.switch import EmbeddedSwitch, SwitchConfig
from sw.clock import Clock


class CapturingSwitch(EmbeddedSwitch):
    """Every frame the switch transmits (forwarded, or its own PFC frames) lands in ``sent`` as (port, frame)."""

    def __init__(self, pipeline: SwitchPipeline, config: SwitchConfig, clock: Clock | None = None) -> None:
        self.sent: list[tuple[int, bytes]] = []
        super().__init__(pipeline, config, clock)

    def transmit(self, port_num: int, frame: bytes, now_ns: int) -> None:
        self.sent.append((port_num, frame))
