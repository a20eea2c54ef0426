"""Shared by the ops tests: the recorded campaign stores of ``data/``, each decompressed once per session."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from sw.ops.expected import Expected, calibrate
from sw.units.telemetry import TelemetryStore

DATA = Path(__file__).with_name("data")


@pytest.fixture(scope="session")
def recorded_store(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], TelemetryStore]:
    """``recorded_store("x.sqlite.gz")``: that recorded store, opened from a decompressed copy."""
    opened: dict[str, TelemetryStore] = {}

    def open_store(name: str) -> TelemetryStore:
        if name not in opened:
            path = tmp_path_factory.mktemp("ops") / "run.sqlite"
            path.write_bytes(gzip.decompress((DATA / name).read_bytes()))
            opened[name] = TelemetryStore(path)
        return opened[name]

    return open_store


@pytest.fixture(scope="session")
def recorded_calibrated(recorded_store: Callable[[str], TelemetryStore]
                        ) -> Callable[[str], tuple[TelemetryStore, Expected]]:
    """``recorded_calibrated("x.sqlite.gz")``: that recorded store and its model of steps 1..3 from every kind of
    row it holds (as the campaign calibrates)."""

    def open_calibrated(name: str) -> tuple[TelemetryStore, Expected]:
        s = recorded_store(name)
        return s, calibrate(s.steps(), s.collectives(), s.port_polls(), 1, 3, s.nic_counters(), s.int_hops())

    return open_calibrated
