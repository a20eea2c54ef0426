"""Property-based fuzzing of every receive path's parser (issue 24): frames mutated from real ones (truncations,
bit flips, length-field edits, 0 bytes to jumbo, checksums made right again so the mutation reaches the deeper
layers) give either a parse result or the path's one format error, never another exception; a NIC fed them in
the middle of an RDMA WRITE counts each frame exactly once and finishes the WRITE with exact data."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emu.control_plane import IntConfig, switch_commands
from emu.probe import IntFormatError, parse_report
from emu.probe import parse_int as probe_parse_int
from p4.switch.pipeline_adapter import load_pipeline
from p4.switch.switch import EmbeddedSwitch, SwitchConfig
from sw.clock import ManualClock
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.roce.softnic.loopback import LinkProfile
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.pfc import NicPfc
from sw.roce.wire.decode import RocePacket, decode
from sw.roce.wire.ecn import ecn_of, mark_ce
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.int_md import (
    INT_HOP_BYTES,
    INT_MD_BYTES,
    INT_SHIM_BYTES,
    IntHopRecord,
    carries_int,
    insert_int,
    parse_int,
    strip_int,
)
from sw.units.pfc_frame import frame_dscp, is_mac_control, parse_pfc_frame
from tests.sw.roce.softnic.rx_frames import FIELD_OFFSETS, FIELD_VALUES, JUMBO_BYTES, WritePair, mutate, real_frames

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[4] / "p4" / "programs" / "fabric.p4"
OTHER_QP = 0xABCDEF
FRAMES = real_frames()
NAMES = sorted(FRAMES)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_op = st.one_of(
    st.tuples(st.just("cut"), st.one_of(st.sampled_from((0, 1, 13, 14, 33, 34, 41, 42, 54, 62)),
                                        st.integers(0, 200)), st.just(0)),
    st.tuples(st.sampled_from(("flip", "byte")), st.integers(0, 255), st.integers(0, 255)),
    st.tuples(st.sampled_from(("u8", "u16")), st.integers(0, len(FIELD_OFFSETS) - 1),
              st.one_of(st.sampled_from(FIELD_VALUES), st.integers(0, 0xFFFF))),
    st.tuples(st.just("sub"), st.integers(0, len(FIELD_OFFSETS) - 1),
              st.one_of(st.sampled_from((1, 4, 16, 28)), st.integers(1, 255))),
    st.tuples(st.just("grow"), st.sampled_from((1, 100, 1500, JUMBO_BYTES)), st.integers(0, 0xFFFF)),
    st.tuples(st.just("fix"), st.just(0), st.just(0)),
)


@st.composite
def mutated(draw: Any, frames: dict[str, bytes] = FRAMES) -> bytes:
    """A real frame after one to four mutations, or (rarely) raw bytes of any size up to a jumbo frame."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(max_size=JUMBO_BYTES))
    return mutate(frames[draw(st.sampled_from(sorted(frames)))], draw(st.lists(_op, min_size=1, max_size=4)))


def _either(fn: Any, frame: bytes, error: type[Exception] = RoceFormatError) -> Any:
    """``fn(frame)``, or None when it raised ``error`` (any other exception fails the test)."""
    try:
        return fn(frame)
    except error:
        return None


@FUZZ
@given(mutated())
def test_roce_decoder_returns_a_packet_or_raises_the_format_error(frame):
    for pkt in (_either(decode, frame), _either(lambda f: decode(f, check_icrc=False), frame)):
        assert pkt is None or isinstance(pkt, RocePacket)


@FUZZ
@given(mutated({name: f for name, f in FRAMES.items() if carries_int(f)}))
def test_int_parse_and_strip_return_a_result_or_raise_the_format_error(frame):
    if not carries_int(frame):
        assert _either(parse_int, frame) is None
        return
    parsed = _either(parse_int, frame)
    stripped = _either(strip_int, frame)
    assert (parsed is None) == (stripped is None), "parse_int and strip_int agree on what is malformed"
    if stripped is not None:
        out, hops = stripped
        assert len(out) == len(frame) - parsed[1] and list(hops) == parsed[0]
        _either(lambda f: decode(f, check_icrc=False), out)


@FUZZ
@given(mutated())
def test_pfc_codec_and_nic_pfc_return_a_result_or_raise_the_format_error(frame):
    quanta = parse_pfc_frame(frame)                 # the one codec: None for anything but a PFC frame
    assert quanta is None or all(0 <= p < 8 and 0 <= q <= 0xFFFF for p, q in quanta.items())
    nic_pfc = NicPfc(mac="02:00:00:00:00:01", line_rate_bps=10**9, send=lambda _frame: None)
    consumed = _either(lambda f: nic_pfc.on_frame(f, 0), frame)
    assert consumed is None or consumed == (quanta is not None)
    assert isinstance(is_mac_control(frame), bool)
    assert frame_dscp(frame) in (None, *range(64))


@FUZZ
@given(mutated())
def test_ecn_reads_and_marks_or_raises_the_format_error(frame):
    ecn = _either(ecn_of, frame)
    assert ecn is None or 0 <= ecn <= 3
    marked = _either(mark_ce, frame)
    assert marked is None or len(marked) == len(frame)


@FUZZ
@given(mutated())
def test_int_collector_and_prober_return_a_report_or_raise_their_format_error(frame):
    report = _either(parse_report, frame, IntFormatError)
    assert report is None or report["hops"] >= 0
    if len(frame) >= 34 and frame[12:14] == b"\x08\x00":
        ihl = (frame[14] & 0x0F) * 4
        _either(lambda f: probe_parse_int(f[15], f[14 + ihl + 8:]), frame, IntFormatError)


def _assert_every_frame_counted_once(nic: SoftNic) -> None:
    c = nic.counters
    assert c.rx_frames == c.qp_frames + c.pfc_frames + c.unknown_qp_frames + c.non_roce_frames + c.malformed_frames
    assert sum(c.drop_reasons.values()) == c.non_roce_frames + c.malformed_frames


def test_a_nic_mid_write_counts_every_mutated_frame_once_and_finishes_the_write():
    """Mutations of frames to another QP of the receiver (so no forged frame can take part in the WRITE)."""
    pair = WritePair()
    frames = real_frames(dst_qp=OTHER_QP)

    @FUZZ
    @given(st.lists(mutated(frames), min_size=1, max_size=6))
    def feed(batch):
        pair.inject(batch)
        _assert_every_frame_counted_once(pair.b)

    feed()
    pair.finish()
    _assert_every_frame_counted_once(pair.b)
    assert pair.b.counters.malformed_frames > 100 and pair.b.counters.unknown_qp_frames > 0


def test_mutated_frames_that_reach_a_qp_never_raise_in_the_transport():
    """Mutations of frames to the receiver's own QP, checksums made right again: the QP's transport sees
    nonsense PSNs, opcodes and lengths; it may NAK or fail the QP, never raise out of the receive loop."""
    pair = WritePair()
    with_fix = st.lists(_op, min_size=1, max_size=3).map(lambda ops: [*ops, ("fix", 0, 0)])

    @FUZZ
    @given(st.lists(st.tuples(st.sampled_from(NAMES), with_fix), min_size=1, max_size=6))
    def feed(batch):
        pair.inject([mutate(FRAMES[name], ops) for name, ops in batch])
        _assert_every_frame_counted_once(pair.b)

    feed()
    assert pair.b.counters.qp_frames > 0


@pytest.mark.parametrize("pfc", [False, True], ids=["pfc_off", "pfc_on"])
def test_the_fabric_switch_forwards_or_drops_every_mutated_frame_by_a_counted_reason(tmp_path, pfc):
    """fabric.p4 on the embedded switch (a leaf, INT and ECN on; PFC off, or on with its DSCP classification and
    pauses honoured): every mutated frame is forwarded (here: to a port without an interface, counted as
    ``no_port_drop_pkts``) or dropped with a counted reason; the program never raises (``pipeline_error_pkts``
    stays 0)."""
    topo = Topology(TopologySpec(servers=2, gpus_per_server=1, spines=0))
    a, b = topo.nics
    clock = ManualClock()
    switch = EmbeddedSwitch(load_pipeline(FABRIC_P4, clock=clock, device_id=topo.switch(a.leaf).device_id),
                      SwitchConfig(interfaces=[], log_file=str(tmp_path / "sw.log")), clock=clock)
    for line in switch_commands(topo, a.leaf, None, IntConfig(sink_mode="host")):
        switch.execute(line)
    if pfc:
        for port in (a.leaf_port, b.leaf_port):
            switch.execute(f"pfc_enable {port} 1")
    frames = real_frames(OTHER_QP, macs=(a.mac, a.gateway_mac), ips=(a.ip, b.ip))
    sent = [0]

    @FUZZ
    @given(st.lists(mutated(frames), min_size=1, max_size=4))
    def feed(batch):
        for frame in batch:
            switch.receive(a.leaf_port, frame, clock.now_ns())
        sent[0] += len(batch)
        stats = switch.port_stats()
        assert stats[a.leaf_port]["pipeline_error_pkts"] == 0
        counted = sum(s[k] for s in stats.values() for k in ("pipeline_drop_pkts", "no_port_drop_pkts",
                                                              "queue_drop_pkts", "mac_control_pkts", "qdepth_pkts"))
        assert counted == sent[0]

    try:
        feed()
        stats = switch.port_stats()
        assert stats[b.leaf_port]["no_port_drop_pkts"] > 0 and stats[a.leaf_port]["pipeline_drop_pkts"] > 0
        assert stats[a.leaf_port]["mac_control_pkts"] > 0
        assert (stats[a.leaf_port]["pfc_pauses_rx"] > 0) == pfc, "pauses are honoured with PFC on only"
    finally:
        switch.close()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.lists(st.tuples(st.integers(0, 2 * INT_HOP_BYTES - 1), st.integers(0, 255)),
                                       min_size=1, max_size=12))
def test_hpcc_on_echoed_int_with_garbage_hop_records_still_finishes_the_write(seed, edits):
    """Data frames gain two INT hops on the way (as a switch stamps them) and the receiver echoes them; on the
    way back the hop records (which no ICRC covers) are overwritten with garbage: the sender's HPCC takes
    whatever it gets and the WRITE completes with exact data."""
    rng = random.Random(seed)

    def stamp(frame: bytes) -> bytes:
        hops = [IntHopRecord(1, 1, 2, rng.randrange(1 << 32), 0, rng.randrange(1 << 24), rng.randrange(1 << 64),
                             rng.randrange(1 << 32)) for _ in range(2)]
        return insert_int(frame, hops, echo=False, remaining_hop_cnt=2) if len(frame) > 60 else frame

    def garble(frame: bytes) -> bytes:
        if not carries_int(frame):
            return frame
        f = bytearray(frame)
        for at, value in edits:
            f[14 + 20 + 8 + INT_SHIM_BYTES + INT_MD_BYTES + at] = value
        return bytes(f)

    pair = WritePair(64 * 1024, cc="hpcc", a_to_b=LinkProfile(transform=stamp), b_to_a=LinkProfile(transform=garble))
    pair.finish()
    assert pair.a.counters.int_frames > 0 and pair.a.counters.malformed_frames == 0
    assert sum(qp.pacer.int_echoes for qp in pair.a.qps.values()) > 0, "HPCC took the garbled echoes"
