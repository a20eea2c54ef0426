"""``starpulse ops report`` without a browser, on the recorded campaign store (4 servers x 2 rails, 2 spines):
the fabric read from the store (and derived from its port polls alone), the per-poll link series, the
diagnosed window's suspect and injected fault resolved to drawn elements, one self-contained page, bad input."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

from sw.apps import ops_cli
from sw.apps.ops_report import fabric_of, fault_place, link_series, report_data
from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))
from ops_report_shot import RECORDED, first_step_window  # noqa: E402


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> TelemetryStore:
    path = tmp_path_factory.mktemp("opsreport") / "run.sqlite"
    path.write_bytes(gzip.decompress(RECORDED.read_bytes()))
    return TelemetryStore(path)


def test_the_fabric_comes_from_the_store_and_from_its_polls_alone(recorded: TelemetryStore) -> None:
    polls = recorded.port_polls()
    nodes, links = fabric_of(recorded.meta()["links"], polls)
    roles = {n["name"]: n["role"] for n in nodes}
    assert roles == {"s0": "server", "s1": "server", "s2": "server", "s3": "server", "p0l0": "leaf",
                     "p0l1": "leaf", "sp0": "spine", "sp1": "spine"}
    assert len(links) == 12 and sum(lk["kind"] == "leaf-spine" for lk in links) == 4
    assert {(lk["a"], lk["nic"]) for lk in links if lk["b"] == "p0l1"} == {(f"s{i}", 1) for i in range(4)}
    derived_nodes, derived = fabric_of([], polls)       # a store without recorded links
    assert {n["name"]: n["role"] for n in derived_nodes} == roles
    assert {(lk["a"], lk["b"], lk["kind"], lk["nic"]) for lk in derived} == \
        {(lk["a"], lk["b"], lk["kind"], lk["nic"]) for lk in links}


def test_link_series_show_load_and_the_leaf_spine_link_that_went_down(recorded: TelemetryStore) -> None:
    polls = recorded.port_polls()
    _, links = fabric_of(recorded.meta()["links"], polls)
    times, series = link_series(links, polls, 100e6)
    assert len(times) == 133 and set(series) == {lk["id"] for lk in links}
    busy = [u for u in series["link-s0--p0l0"]["util"] if u]
    assert busy and max(busy) > 0.01           # the job's all-to-all moves bytes on a NIC link
    down = [i for i, t in enumerate(times) if series["link-p0l0--sp1"]["up"][i] == 0]
    recorded_down = {t for t, in recorded.db.execute("SELECT t_ns FROM ports WHERE up = 0")}
    assert down and {times[i] for i in down} == recorded_down
    assert all(series["link-p0l0--sp1"]["up"][i] == 1 for i in range(len(times)) if i not in down)


def test_fault_targets_name_places_as_the_diagnosis_does() -> None:
    assert fault_place("4") == "rank 4"
    assert fault_place("s1:p0l0") == "s1<->p0l0"
    assert fault_place("sp0") == "sp0"
    assert fault_place("s1:0") == "s1-eth0"              # pfc_storm HOST:RAIL: that NIC (drawn as its link)


@pytest.mark.parametrize(("action", "target", "kind", "element"), [
    ("switch_stop", "sp0", "dead_switch", "node-sp0"),
    ("slow_gpu", "4", "slow_gpu", "rank-4"),
    ("slow_link", "s1:p0l0", "degraded_link", "link-s1--p0l0"),
])
def test_the_window_after_a_fault_names_its_drawn_place(recorded: TelemetryStore, action: str, target: str,
                                                        kind: str, element: str) -> None:
    since_s, until_s = first_step_window(recorded, action, target)
    data = report_data(recorded, since_s, until_s, ops_cli.DEFAULT_CALIBRATION)
    top = data["diagnosis"]["suspects"][0]
    assert top["kind"] == kind and top["targets"] == [element] and top["rank_in_diagnosis"] == 1
    marked = [f for f in data["faults"] if f["in_window"]]
    assert [(f["action"], f["target"], f["targets"]) for f in marked] == [(action, target, [element])]
    assert len(data["steps"]) == 344 and len(data["ranks"]) == 8
    assert data["times_s"][data["start_index"]] <= until_s < data["times_s"][data["start_index"] + 1]


def test_the_page_is_one_self_contained_file_with_its_data(recorded: TelemetryStore, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    since_s, until_s = first_step_window(recorded, "switch_stop", "sp0")
    assert ops_cli.main(["report", str(out), "--store", str(recorded.path), "--since", repr(since_s),
                         "--until", repr(until_s)]) == 0
    page = out.read_text()
    assert re.findall(r"""(?:src|href)\s*=\s*["'](?!data:)""", page) == []       # nothing loaded from anywhere
    assert "@import" not in page and "<script src" not in page
    blob = re.search(r'<script type="application/json" id="ops-data">(.*?)</script>', page, re.S)
    assert blob is not None
    data = json.loads(blob.group(1))
    assert data["diagnosis"]["suspects"][0]["place"] == "sp0" and len(data["nodes"]) == 8


@pytest.mark.parametrize(("argv", "needle"), [
    (["report", "/nonexistent-dir/r.html", "--store", "STORE"], "/nonexistent-dir/r.html: cannot write the report"),
    (["report", "OUT", "--store", "STORE", "--since", "3", "--until", "2"], "--until 2: must be after"),
])
def test_bad_report_input_is_one_line_and_exit_2(recorded: TelemetryStore, tmp_path: Path, capsys, argv: list[str],
                                                 needle: str) -> None:
    argv = [{"STORE": str(recorded.path), "OUT": str(tmp_path / "r.html")}.get(a, a) for a in argv]
    assert ops_cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in lines[0], lines
    assert not (tmp_path / "r.html").exists()


PFC_STORE = REPO / "tests" / "sw" / "ops" / "data" / "campaign_4x2_seed7_9kinds_pfc.sqlite.gz"


def test_a_pfc_storm_window_outlines_the_storming_nics_link(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    path.write_bytes(gzip.decompress(PFC_STORE.read_bytes()))
    store = TelemetryStore(path)
    origin = int(store.meta()["origin_ns"])
    storm = next(f for f in store.faults() if f["action"] == "pfc_storm")
    held_until = store.db.execute(             # the first poll after which the held port's paused time stopped growing
        "SELECT min(t_ns) FROM ports WHERE switch = 'p0l1' AND port = 2 AND pfc_paused_ns = "
        "(SELECT max(pfc_paused_ns) FROM ports WHERE switch = 'p0l1' AND port = 2)").fetchone()[0]
    data = report_data(store, (storm["t_ns"] - origin) / 1e9, (held_until - origin + 1000) / 1e9,
                       ops_cli.DEFAULT_CALIBRATION)
    top = data["diagnosis"]["suspects"][0]
    assert (top["kind"], top["place"], top["targets"]) == ("pfc_storm", "s1<->p0l1", ["link-s1--p0l1"])
    marked = [f for f in data["faults"] if f["in_window"]]
    assert [(f["action"], f["place"], f["targets"]) for f in marked] == [("pfc_storm", "s1-eth1", ["link-s1--p0l1"])]
