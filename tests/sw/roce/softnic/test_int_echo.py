"""INT echo for HPCC: insert_int is strip_int's inverse, an echoed ACK crosses fabric.p4 without gaining hops,
tshark dissects the ACK after strip, and the requester turns echoed hops into HPCC input."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from emu.control_plane import IntConfig, switch_commands
from p4.compiler import compile_file
from p4.pipeline import Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.cc.hpcc import Hpcc
from sw.clock import ManualClock
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.roce import Flow, FlowTemplates, Opcode, decode
from sw.roce.softnic.qp_pacer import QpPacer, make_cc
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.int_md import (
    DSCP_INT,
    INT_ECHO_DOMAIN_ID,
    INT_SHIM_BYTES,
    IntHopRecord,
    carries_int,
    insert_int,
    parse_int,
    strip_int,
)
from sw.roce.wire.sample_pcaps import write_frames

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[4] / "p4" / "programs" / "fabric.p4"
TOPO = Topology(TopologySpec(servers=2, gpus_per_server=1, spines=1))
HOPS = [
    IntHopRecord(node_id=7, ingress_port=1, egress_port=3, hop_latency=12, queue_id=0, queue_occupancy=5,
                 egress_timestamp=1_000_123, egress_tx_bytes=0xFFFF_FF00),
    IntHopRecord(node_id=2, ingress_port=4, egress_port=2, hop_latency=0, queue_id=0, queue_occupancy=0,
                 egress_timestamp=1_000_100, egress_tx_bytes=42),
]


def _ack(src, dst) -> bytes:
    flow = Flow(src.mac, src.gateway_mac, src.ip, dst.ip, 0x22, 0x11)
    return FlowTemplates(flow)[Opcode.ACKNOWLEDGE].build(99, b"", ext=HeaderFields(syndrome=0x1F, msn=3))


def _shim_offset(frame: bytes) -> int:
    return 14 + (frame[14] & 0x0F) * 4 + 8


def test_insert_then_strip_gives_the_ack_back_bit_for_bit_with_a_valid_icrc():
    a, b = TOPO.nics_of("s1")[0], TOPO.nics_of("s0")[0]
    ack = _ack(a, b)
    echoed = insert_int(ack, HOPS)
    assert carries_int(echoed) and len(echoed) == len(ack) + 16 + 2 * 28
    shim = _shim_offset(echoed)
    assert echoed[shim + INT_SHIM_BYTES + 3] == 0, "remaining hop count 0: no switch adds a hop"
    assert struct.unpack_from(">H", echoed, shim + INT_SHIM_BYTES + 6)[0] == INT_ECHO_DOMAIN_ID
    plain, hops = strip_int(echoed)
    assert plain == ack and list(hops) == HOPS and hops.echoed
    assert decode(plain).icrc_ok
    with pytest.raises(ValueError):
        insert_int(echoed, HOPS)  # a frame carries one INT stack


def test_echoed_ack_crosses_the_fabric_without_gaining_hops():
    a, b = TOPO.nics_of("s1")[0], TOPO.nics_of("s0")[0]
    pipe = Pipeline(compile_file(FABRIC_P4), clock=ManualClock(start_ns=1_000_000),
                    device_id=TOPO.switch(a.leaf).device_id)
    cli = RuntimeCLI(pipe)
    for line in switch_commands(TOPO, a.leaf, None, IntConfig(sink_mode="host")):
        cli.execute(line)
    out, _ = pipe.process(a.leaf_port, insert_int(_ack(a, b), HOPS))
    assert [port for port, _ in out] == [b.leaf_port]
    frame = out[0][1]
    hops, _, _ = parse_int(frame)
    assert hops == HOPS, "the reverse path added nothing to the echoed forward-path hops"
    plain, stripped = strip_int(frame)
    assert stripped.echoed and (frame[15] >> 2) == DSCP_INT
    pkt = decode(plain)
    assert pkt.opcode == Opcode.ACKNOWLEDGE and pkt.psn == 99 and pkt.icrc_ok


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_dissects_the_ack_after_strip(tmp_path):
    a, b = TOPO.nics_of("s1")[0], TOPO.nics_of("s0")[0]
    plain, _ = strip_int(insert_int(_ack(a, b), HOPS))
    write_frames(tmp_path / "ack.pcap", [plain])
    out = subprocess.run(["tshark", "-r", str(tmp_path / "ack.pcap"), "-T", "json"], capture_output=True,
                         text=True, timeout=60, check=True)
    layers = json.loads(out.stdout)[0]["_source"]["layers"]
    assert "infiniband" in layers
    assert "infiniband.aeth" in json.dumps(layers["infiniband"])


def test_pacer_converts_echoed_hops_to_hpcc_units():
    pacer = QpPacer(make_cc("hpcc", 100_000_000, base_rtt_ns=200_000), 0)
    pacer.hop_link_kbps = {2: 50_000}
    hops = pacer.int_hops(HOPS, 1082)
    assert hops[0].ts_ns == 1_000_123_000 and hops[0].tx_bytes == 0xFFFF_FF00
    assert hops[0].qlen_bytes == 5 * 1082 and hops[0].link_kbps == 100_000
    assert hops[1].link_kbps == 50_000


def test_closed_window_means_wait_for_an_ack_not_now():
    cc = make_cc("hpcc", 100_000_000, base_rtt_ns=200_000)
    assert isinstance(cc, Hpcc)
    pacer = QpPacer(cc, 0)
    window = cc.window_bytes
    assert window is not None
    assert pacer.next_send_ns(10**6, inflight_bytes=window) is None
    assert not pacer.may_send(10**6, inflight_bytes=window)
    assert pacer.next_send_ns(10**6, inflight_bytes=0) is not None
