"""Shared by the ops tests: the recorded campaign stores of ``data/``, each decompressed once per session."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

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
