"""Robustness of the switch process: bad control input, random frames, a vanishing interface, clean shutdown,
and command-line errors that are one clear line, never a traceback."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from switchlab import FEATURES_P4, host_ip, host_mac

from p4.errors import CommandError

pytestmark = pytest.mark.emu

ROUTES = "\n".join(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward {host_ip(i)}/32 => {host_mac(i)} {i}"
                   for i in range(1, 5)) + "\n"


def udp_frame(src: int, dst: int, seq: int) -> bytes:
    return bytes(Ether(src=host_mac(src), dst="02:00:00:00:00:fe")
                 / IP(src=host_ip(src), dst=host_ip(dst), id=seq) / UDP(sport=1, dport=2) / bytes(20))


def udp_only(frames: list[bytes]) -> list[bytes]:
    return [f for f in frames if len(f) > 23 and f[12:14] == b"\x08\x00" and f[23] == 17]


def assert_forwards(lab, seq: int) -> None:
    lab.send(1, [udp_frame(1, 2, seq)])
    got = udp_only(lab.recv(2, want=1))
    assert [IP(f[14:]).id for f in got] == [seq]


MALFORMED = [
    "table_add",                                               # missing everything
    "table_add MyIngress.nope MyIngress.ipv4_forward 10.0.0.1/32 => 0 1",
    "table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.0.1/40 => 0 1",
    "table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.0.1/32 => zz 1",
    "set_queue_rate fast 2",
    "set_queue_depth 0 2",
    "set_queue_rate 10 2 5",                                   # priority queue the switch lacks
    "set_port_rate 2 10Q",
    "set_port_rate 2 1G x",
    "port_stats x",
    "register_read",
    "mc_node_associate 1 99",
    "frobnicate 1 2 3",
    'table_add "unterminated',
]


def test_malformed_control_commands_give_clear_errors_and_switch_keeps_forwarding(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES)
    with lab.client() as c:
        for cmd in MALFORMED:
            with pytest.raises(CommandError) as info:
                c.run(cmd)
            msg = str(info.value)
            assert msg and "Traceback" not in msg and "\n" not in msg.strip(), (cmd, msg)
        # garbage on the wire itself: not JSON, wrong types, an empty object, binary
        for raw in (b"hello\n", b"[1,2]\n", b'{"cmd": 5}\n', b"{}\n", b"\xff\xfe\x00\n"):
            c.sock.sendall(raw)
            reply = c._read()
            assert reply["ok"] is False and reply["error"]
        assert c.run("table_num_entries MyIngress.ipv4_lpm").strip().endswith("4")
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)   # a client that hangs up mid-request
    raw.connect(lab.ctl)
    raw.sendall(b'{"cmd": "show_ta')
    raw.close()
    assert_forwards(lab, 4242)
    assert lab.proc.poll() is None


def test_ten_thousand_random_frames_do_not_crash_the_switch(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES)
    rng = random.Random(4)
    sent = 0
    base = udp_frame(1, 2, 0)
    for _chunk in range(20):
        frames = []
        for _ in range(500):
            kind = rng.random()
            if kind < 0.4:                                     # pure noise
                f = bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 200)))
            elif kind < 0.8:                                   # IPv4 ethertype, random (often truncated) rest
                f = base[:12] + b"\x08\x00" + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 60)))
            else:                                              # a valid frame with random bytes flipped
                b = bytearray(base)
                for _ in range(rng.randint(1, 6)):
                    b[rng.randrange(14, len(b))] = rng.getrandbits(8)
                f = bytes(b)
            frames.append(f)
        lab.send(1, frames)
        sent += len(frames)
        deadline = time.monotonic() + 20
        while lab.port_stats()[1]["rx_pkts"] < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        lab.recv(2, quiet_s=0.05, limit_s=0.5)                 # drain what got forwarded
    assert lab.proc.poll() is None
    stats = lab.port_stats()
    assert stats[1]["rx_pkts"] == 10_000
    assert_forwards(lab, 777)


def test_interface_disappearing_keeps_other_ports_forwarding(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES)
    assert_forwards(lab, 1)
    lab.hosts[3].cmd("ip", "link", "delete", "eth0")             # p3 in the switch goes with it
    lab.send(1, [udp_frame(1, 3, 2)])                           # traffic to the vanished port
    deadline = time.monotonic() + 10
    while lab.port_stats()[3]["up"] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = lab.port_stats()
    assert stats[3]["up"] == 0
    assert_forwards(lab, 3)
    assert lab.proc.poll() is None
    assert "p3 is gone" in lab.log_text()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_and_removes_control_socket(switch_lab, sig) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES)
    assert_forwards(lab, 5)
    assert lab.stop(sig) == 0


    assert not os.path.exists(lab.ctl)
    assert "stopping" in lab.log_text()


def test_cli_runs_a_command_file_from_stdin_and_reports_failures(switch_lab) -> None:
    lab = switch_lab
    lab.start()
    script = ROUTES + "# a comment\n\nshow_tables\nbogus_command\ntable_num_entries MyIngress.ipv4_lpm\n"
    out = subprocess.run([sys.executable, "-m", "p4.switch", "cli", "--ctl", lab.ctl], input=script,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "MyIngress.ipv4_lpm" in out.stdout and out.stdout.rstrip().endswith("4")
    assert "line 8: bogus_command: error: unknown command" in out.stderr
    assert "Traceback" not in out.stderr
    assert_forwards(lab, 9)


def _switch_cmd(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "p4.switch", *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("argv, needle", [
    ((str(FEATURES_P4), "-i", "eth9"), "-i 'eth9': expected PORT@IFACE"),
    ((str(FEATURES_P4), "-i", "1@nosuchif0"), "interface 'nosuchif0' does not exist"),
    (("/nonexistent.p4",), "no such file"),
    ((str(FEATURES_P4), "--priority-queues", "9"), "--priority-queues 9: allowed 1..8"),
    ((str(FEATURES_P4), "--ctl", "/nonexistent-dir/ctl.sock"), "--ctl /nonexistent-dir/ctl.sock"),
    ((str(FEATURES_P4), "--pcap", "/proc/nope"), "--pcap /proc/nope: cannot write there"),
    ((str(FEATURES_P4), "--log-file", "/proc/nope/x.log"), "--log-file /proc/nope/x.log: cannot write it"),
])
def test_bad_switch_arguments_are_one_line_errors(argv, needle) -> None:
    out = _switch_cmd(*argv)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_program_with_a_syntax_error_is_reported_with_its_position(tmp_path) -> None:
    bad = tmp_path / "bad.p4"
    bad.write_text(FEATURES_P4.read_text().replace("ttl - 1;", "ttl - ;"))
    out = _switch_cmd(str(bad))
    assert out.returncode == 2
    assert "bad.p4:" in out.stderr and "syntax error" in out.stderr and "Traceback" not in out.stderr


def test_cli_without_a_switch_is_a_clear_error(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "p4.switch", "cli", "--ctl", str(tmp_path / "none.sock"),
                          "-c", "show_tables"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no switch answers there" in out.stderr


def test_json_request_for_describe_lists_commands_and_names(switch_lab) -> None:
    lab = switch_lab
    lab.start()
    with lab.client() as c:
        info = c.describe()
    assert {"table_add", "port_stats", "set_port_rate"} <= set(info["commands"])
    assert "MyIngress.ipv4_lpm" in info["names"]
    assert json.dumps(info)


def test_interactive_shell_completes_names_and_keeps_history(switch_lab, tmp_path) -> None:
    import pty

    lab = switch_lab
    lab.start(commands=ROUTES)
    hist = tmp_path / "hist"
    master, slave = pty.openpty()
    env = dict(os.environ, STARPULSE_P4CLI_HISTORY=str(hist), TERM="dumb")
    proc = subprocess.Popen([sys.executable, "-m", "p4.switch", "cli", "--ctl", lab.ctl], stdin=slave,
                            stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""

    def read_until(needle: bytes, limit_s: float = 20) -> None:
        nonlocal out
        deadline = time.monotonic() + limit_s
        while needle not in out and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    out += os.read(master, 4096)
                except OSError:
                    break

    try:
        read_until(b"p4> ")
        os.write(master, b"table_num_entries MyIngress.ipv\t\n")    # only tables fit here: completes
        read_until(b"4\r\n")
        os.write(master, b"bogus\n")
        read_until(b"unknown command")
        os.write(master, b"exit\n")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert b"MyIngress.ipv4_lpm" in out and b"unknown command 'bogus'" in out
    assert "table_num_entries MyIngress.ipv4_lpm" in hist.read_text()


def test_control_over_tcp_inside_the_switch_namespace(switch_lab) -> None:
    lab = switch_lab
    lab.ctl = "9559"
    lab.start(commands=ROUTES)
    out = lab.sw.cmd(sys.executable, "-m", "p4.switch", "cli", "--ctl", "9559", "-c",
                     "table_num_entries MyIngress.ipv4_lpm", "-c", "port_stats 1")
    assert out.splitlines()[0].strip() == "4"
    assert out.splitlines()[1].split()[:2] == ["port", "iface"]
    assert_forwards(lab, 11)


def test_link_down_and_up_again_resumes_forwarding(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES)
    assert_forwards(lab, 21)
    lab.sw.cmd("ip", "link", "set", "p2", "down")
    lab.send(1, [udp_frame(1, 2, 22)])                          # lost: the egress link is down
    time.sleep(0.3)
    stat0 = open(f"/proc/{lab.proc.pid}/stat").read().rsplit(")", 1)[1].split()
    time.sleep(0.5)
    stat1 = open(f"/proc/{lab.proc.pid}/stat").read().rsplit(")", 1)[1].split()
    busy_ticks = int(stat1[11]) + int(stat1[12]) - int(stat0[11]) - int(stat0[12])
    assert busy_ticks < 0.25 * os.sysconf("SC_CLK_TCK"), "switch spins while a link is down"
    lab.sw.cmd("ip", "link", "set", "p2", "up")
    lab.recv(2, quiet_s=0.3)
    assert_forwards(lab, 23)
    assert lab.port_stats()[2]["up"] == 1
