"""The PFC-storm rule on recorded data: the telemetry store of a real campaign on a PFC fabric
(``data/STORE``, see ``RECORDED``), judged as the campaign does: no suspects in its healthy steps, and after the
injected storm (a NIC sending maximum-quanta pauses into its leaf) the link to that NIC named first as a
``pfc_storm`` with its evidence (pauses received, held share, idle egress), the other suspects at that place
folded into it; ordinary PFC pauses a port receives while its traffic moves name nothing."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from sw.apps.ops_campaign import step_bounds, window_diagnosis
from sw.ops.diagnose import PFC_IDLE_UTIL, PFC_PAUSED_SHARE, diagnose
from sw.ops.expected import Expected, calibrate, port_deltas
from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.unit

DATA = Path(__file__).with_name("data") / "STORE"
WINDOW_STEPS = 3


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> TelemetryStore:
    path = tmp_path_factory.mktemp("ops") / "run.sqlite"
    path.write_bytes(gzip.decompress(DATA.read_bytes()))
    return TelemetryStore(path)


@pytest.fixture(scope="module")
def expected(recorded: TelemetryStore) -> Expected:
    return calibrate(recorded.steps(), recorded.collectives(), recorded.port_polls(), 1, 3, recorded.nic_counters())
