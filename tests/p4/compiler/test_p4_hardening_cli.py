"""Bad command files, command values, pcap files and bench flags of `starpulse p4` and the switch: one error
line naming the file:line or the flag and what is allowed (exit 2), never a traceback (exit 70)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from p4.errors import CommandError
from p4.switch.pipeline_adapter import load_pipeline
from p4.switch.switch import EmbeddedSwitch, SwitchConfig
from sw.cli import main
from sw.clock import ManualClock
from sw.units.pcap_file import PcapFormatError, read_pcap, write_pcap
from tests.p4.compiler.conftest import PROGRAMS
from tests.p4.switch.capture_switch import CapturingSwitch

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import ProgramSwitch

pytestmark = pytest.mark.unit

FRAME = bytes(12) + b"\x08\x00" + bytes(46)


def _sim(tmp_path: Path, *extra: str) -> int:
    pcap = tmp_path / "in.pcap"
    write_pcap(pcap, [(0, FRAME)])
    return main(["p4", "sim", str(PROGRAMS / "basic.p4"), "--in", f"1:{pcap}", "--out", str(tmp_path / "o"),
                 *extra])


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# --- item 3: command files that are not text --------------------------------------------------------------------
@pytest.mark.parametrize(("content", "words"), [
    (b"table_clear ipv4_lpm\n\xff\xfe\n", ":2: byte 0xff is not UTF-8"),
    (b"\x00\x01\x02\x03", ":1: binary data"),
    (None, "is a directory"),
])
def test_sim_commands_file_that_is_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            content: bytes | None, words: str) -> None:
    cmds = tmp_path / "cmds"
    if content is None:
        cmds.mkdir()
    else:
        cmds.write_bytes(content)
    assert _sim(tmp_path, "--commands", str(cmds)) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(cmds) in line and words in line, line


# --- item 7: ports out of range ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", [
    "mc_node_create 1 2 99999", "mc_node_create 1 -1", "mc_node_create 1 511", "mirroring_add 5 511",
    "mirroring_add 5 99999", "mirroring_add 5 -1", "set_queue_depth 10 600", "set_queue_rate 10 -3",
])
def test_ports_out_of_range_are_rejected_with_the_range(program_switch: ProgramSwitch, cmd: str) -> None:
    sw = program_switch("multicast.p4")
    with pytest.raises(CommandError, match=r"0\.\.510"):
        sw.cli.execute(cmd)
    assert not sw.pipe.mirror_sessions and not sw.pipe.mc_nodes


def test_sim_never_writes_a_pcap_for_a_port_that_cannot_exist(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("mirroring_add 1 99999\n")
    assert _sim(tmp_path, "--commands", str(cmds)) == 2
    assert f"{cmds}:1: mirroring_add" in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "o" / "port99999.pcap").exists()


@pytest.mark.parametrize("cmd", ["set_queue_rate nan", "set_queue_rate inf 2", "pfc_watchdog 1 nan",
                                 "pfc_watchdog 1 inf", "pfc_watchdog 1 -inf"])
def test_non_finite_numbers_are_command_errors_not_internal_errors(cmd: str) -> None:
    clock = ManualClock()
    sw = EmbeddedSwitch(load_pipeline(PROGRAMS / "qos.p4", clock=clock), SwitchConfig(interfaces=[]), clock)
    try:
        with pytest.raises(CommandError) as exc:
            sw.execute(cmd)
        assert "failed (" not in exc.value.message and "\n" not in exc.value.message
        assert "finite" in exc.value.message, exc.value.message
    finally:
        sw.close()


# --- item 3: pcapng blocks shorter than their header ----------------------------------------------------------
def _shb() -> bytes:
    return struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)


def _block(btype: int, body: bytes) -> bytes:
    return struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


@pytest.mark.parametrize("blocks", [
    [_block(6, b"")],                                   # enhanced packet block with no body
    [_block(6, bytes(8))],                              # ... shorter than its 20-byte header
    [_block(3, b"")],                                   # simple packet block with no length
    [_block(1, bytes(8) + struct.pack("<HH", 9, 4))],   # interface option running past its block
    [_block(6, struct.pack("<IIIII", 0, 0, 0, 500, 500) + bytes(4))],   # captured length beyond the block
    [struct.pack("<II", 6, 13) + bytes(5)],             # block length not a multiple of 4
])
def test_short_pcapng_blocks_are_one_format_error(tmp_path: Path, blocks: list[bytes]) -> None:
    path = tmp_path / "bad.pcapng"
    path.write_bytes(_shb() + _block(1, struct.pack("<HHI", 1, 0, 65535)) + b"".join(blocks))
    with pytest.raises(PcapFormatError, match=r"bad\.pcapng: .*byte \d+"):
        list(read_pcap(path))


def test_sim_with_a_short_pcapng_block_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.pcapng"
    bad.write_bytes(_shb() + _block(6, b""))
    rc = main(["p4", "sim", str(PROGRAMS / "basic.p4"), "--in", f"1:{bad}", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "bad.pcapng" in _one_error_line(capsys.readouterr().err)


# --- item 3: bench flags ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "words"), [
    (["--packets", "0"], "--packets 0: allowed 1..10000000"),
    (["--packets", "-5"], "--packets -5: allowed 1..10000000"),
    (["--size", "100000"], "--size 100000: allowed 42..9216 bytes"),
    (["--size", "10"], "--size 10: allowed 42..9216 bytes"),
])
def test_bench_bad_flags_are_one_error(capsys: pytest.CaptureFixture[str], flags: list[str], words: str) -> None:
    assert main(["p4", "bench", str(PROGRAMS / "basic.p4"), *flags]) == 2
    assert words in _one_error_line(capsys.readouterr().err)


def test_bench_largest_frame_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "bench", str(PROGRAMS / "basic.p4"), "--packets", "3", "--size", "9216", "--mode",
                 "single"]) == 0
    assert "3 packets of 9216 B" in capsys.readouterr().out


def test_check_prints_parser_loop_warning_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = (PROGRAMS / "basic.p4").read_text()
    old = "state start {\n        packet.extract(hdr.ethernet);"
    assert old in src
    bad = tmp_path / "spin.p4"
    bad.write_text(src.replace(old, "state start {\n        transition select(packet.lookahead<bit<8>>()) { "
                                    "0: start; default: eth; }\n    }\n    state eth {\n"
                                    "        packet.extract(hdr.ethernet);", 1))
    assert main(["p4", "check", str(bad)]) == 0
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "warning: parser state 'start' can loop" in err


def test_switch_survives_a_looping_parser_and_forwards_with_parser_timeout(tmp_path: Path) -> None:
    from tests.p4.compiler.test_p4_hardening import LOOP

    prog = tmp_path / "loop.p4"
    prog.write_text(LOOP)
    clock = ManualClock()
    sw = CapturingSwitch(load_pipeline(prog, clock=clock), SwitchConfig(interfaces=[]), clock)
    sent = sw.sent
    try:
        for _ in range(3):
            sw.receive(1, FRAME, clock.now_ns())
        sw._service(clock.now_ns() + 10**9)
        assert sw.pipeline.pipe.parser_errors == {"ParserTimeout": 3}
        assert [p for p, _ in sent] == [2, 2, 2]
    finally:
        sw.close()


@pytest.mark.parametrize("line", [b"[" * 100_000, b'{"cmd": ' + b"[" * 50_000 + b"}", b"\xff\xfe", b"1e999999"])
def test_control_socket_request_that_breaks_the_json_parser_is_one_error(tmp_path: Path, line: bytes) -> None:
    import selectors
    import socket

    from p4.switch.control import ControlServer, _Conn

    sel = selectors.DefaultSelector()
    server = ControlServer(str(tmp_path / "ctl.sock"), sel, lambda cmd: "", lambda: {})
    ours, peer = socket.socketpair()
    try:
        reply = server._handle(_Conn(ours), line)
        assert reply["ok"] is False, reply
        assert "malformed request" in reply["error"] or "unknown request" in reply["error"], reply
    finally:
        ours.close()
        peer.close()
        server.close()
        sel.close()
