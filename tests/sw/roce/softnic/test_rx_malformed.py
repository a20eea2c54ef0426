"""Issue 24 item 1: one malformed frame must never kill a NIC.  The INT-marked frame whose IP/UDP lengths are
shorter than its INT stack and the INT frame with IPv4 header length 0 raise the one RoCE format error in the
INT parser, and a NIC in the middle of an RDMA WRITE counts them by reason, drops them and finishes the WRITE."""

from __future__ import annotations

import json

import pytest

from emu.probe import IntFormatError, count_drop, parse_report
from sw.apps import coll_bench
from sw.collectives.bench import footer_lines
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import BadLengthError, RoceFormatError
from sw.roce.wire.int_md import parse_int, strip_int
from tests.sw.roce.softnic.rx_frames import WritePair, int_frame_ihl_zero, int_frame_short_ip_udp_length, real_frames

pytestmark = pytest.mark.unit

KILLERS = {"short_ip_udp_length": int_frame_short_ip_udp_length, "ihl_zero": int_frame_ihl_zero}


@pytest.mark.parametrize("name", sorted(KILLERS))
def test_the_int_parser_raises_the_format_error_on_issue_24s_frames(name):
    frame = KILLERS[name]()
    with pytest.raises(BadLengthError):
        strip_int(frame)
    with pytest.raises(RoceFormatError):
        parse_int(frame)
    with pytest.raises(RoceFormatError):
        decode(frame)


def test_a_nic_mid_write_counts_and_drops_them_by_reason_and_the_write_completes():
    pair = WritePair()
    for _ in range(5):                               # the WRITE is under way
        pair.wire.deliver()
        pair.a.progress()
        pair.b.progress()
        pair.clock.advance_ns(20_000)
    assert pair.b.counters.rx_frames > 0
    before = pair.b.counters.malformed_frames
    pair.inject([int_frame_short_ip_udp_length(), int_frame_ihl_zero()] * 3)
    c = pair.b.counters
    assert c.malformed_frames - before == 6
    assert c.drop_reasons.get("bad_length", 0) == 6
    assert c.int_frames == 0, "a stack that cannot be stripped is not counted as an INT frame"
    pair.finish()


def test_every_drop_reason_is_counted_once_per_frame_and_valid_frames_still_pass():
    pair = WritePair()
    frames = real_frames()
    bad_icrc = bytearray(frames["send"])
    bad_icrc[-1] ^= 1
    pair.inject([frames["send"][:30], bytes(bad_icrc), b"", b"\xff" * 60, frames["pfc"][:20]])
    c = pair.b.counters
    assert c.drop_reasons == {"truncated": 2, "icrc_mismatch": 1, "not_roce": 2}
    assert c.malformed_frames == 3 and c.non_roce_frames == 2
    pair.finish()


def test_the_int_collector_counts_what_is_no_report_by_reason():
    frames = real_frames()
    assert parse_report(frames["int_write"])["hops"] == 2
    too_long = bytearray(frames["int_write"])
    too_long[14 + 20 + 8 + 1] = 0xFF                 # INT shim: 255 words, more than the frame holds
    drops: dict[str, int] = {}
    for frame in (b"", frames["pfc"], frames["write_v6"], int_frame_ihl_zero(), frames["int_write"][:40],
                  bytes(too_long), frames["write"]):
        with pytest.raises(IntFormatError) as exc:
            parse_report(frame)
        count_drop(drops, exc.value)
    assert drops == {"not_report": 4, "bad_length": 1, "truncated": 2}


def test_the_collectives_bench_reports_its_nics_receive_drops(tmp_path, capfd):
    """Ranks sum their RoCE NICs' drop reasons into the bench report (none here: local ranks have no RoCE NIC);
    the footer names them when there are any."""
    out_json = tmp_path / "out.json"
    code = coll_bench.main(["allreduce", "-b", "8K", "-e", "8K", "--local", "--servers", "2", "--gpus", "1",
                           "-n", "1", "-w", "0", "-J", str(out_json)])
    assert code == 0, capfd.readouterr().out
    report = json.loads(out_json.read_text())
    assert report["nic_rx_drops"] == {}
    lines = footer_lines({**report, "nic_rx_drops": {"bad_length": 6, "icrc_mismatch": 1}})
    assert lines[-1] == "# NIC frames dropped unparsed: bad_length 6, icrc_mismatch 1"
