"""Live fuzz (issue 24): 10,000 frames mutated from real RoCE/INT/PFC/CNP frames (0 bytes to jumbo) into a running
fabric's leaf switch port, and 10,000 straight onto the wire of a NIC that is in the middle of an RDMA WRITE
(`roce perf server`), both while the WRITE (96 MiB) runs.  No process dies; the WRITE completes with exact data; every
frame is accounted for: the sender's kernel took it or rejected it (shorter than an Ethernet header), the switch
counted every frame its port received as forwarded or dropped by reason, and the NIC counted every frame that
reached its wire once (taken by the QP, by PFC, or dropped by reason)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from emu.fabric import Fabric
from emu.traffic import stop_proc
from sw.collectives.fabric_topology import TopologySpec
from tests.sw.roce.softnic.rx_frames import JUMBO_BYTES, fuzz_frames, real_frames

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]
FRAMES_PER_PATH = 10_000
BATCH_FRAMES = 100      # the switch port's receive ring holds 256 jumbo-sized frames
OTHER_QP = 0xABCDEF      # the fuzzed frames' QP: only multi-byte mutations could forge one of the WRITE's frames
DROP_KEYS = ("pipeline_drop_pkts", "queue_drop_pkts", "no_port_drop_pkts", "pipeline_error_pkts", "mac_control_pkts")
# Sends frames from a file (4-byte length + bytes each) on an interface: a batch per line of stdin ("N"),
# answering "OK REJECTED" per batch (the kernel refuses frames shorter than an Ethernet header).
SENDER = """
import socket, sys
data = open(sys.argv[2], "rb").read()
frames, i = [], 0
while i < len(data):
    n = int.from_bytes(data[i:i + 4], "big")
    frames.append(data[i + 4:i + 4 + n])
    i += 4 + n
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
s.bind((sys.argv[1], 0))
print("ready", flush=True)
at = 0
for line in sys.stdin:
    ok = rejected = 0
    for f in frames[at:at + int(line)]:
        try:
            s.send(f)
            ok += 1
        except OSError:
            rejected += 1
    at += int(line)
    print(ok, rejected, flush=True)
"""


def _write_frames(path: Path, frames: list[bytes]) -> None:
    path.write_bytes(b"".join(len(f).to_bytes(4, "big") + f for f in frames))


def _if_stats(node: Any, ifname: str) -> dict[str, int]:
    out = node.cmd(f"cat /sys/class/net/{ifname}/statistics/{{rx_packets,tx_packets,rx_dropped,tx_dropped}}")
    return dict(zip(("rx_packets", "tx_packets", "rx_dropped", "tx_dropped"), map(int, out.split()), strict=True))


def _delta(after: dict[int, dict[str, int]], before: dict[int, dict[str, int]], port: int, key: str) -> int:
    return after[port][key] - before.get(port, {}).get(key, 0)


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_ten_thousand_fuzzed_frames_into_a_switch_port_and_into_a_nic_mid_write(tmp_path) -> None:
    fab = Fabric(TopologySpec(servers=3, gpus_per_server=1, spines=0, mtu=9000))
    with fab:
        client, server, fuzzer = fab.topo.nics
        leaf = fab.net.switches[server.leaf]
        to_switch = fuzz_frames(real_frames(OTHER_QP, macs=(fuzzer.mac, fuzzer.gateway_mac),
                                            ips=(fuzzer.ip, client.ip)), FRAMES_PER_PATH, seed=24)
        to_nic = fuzz_frames(real_frames(OTHER_QP, macs=(server.gateway_mac, server.mac),
                                         ips=(client.ip, server.ip)), FRAMES_PER_PATH, seed=25)
        _write_frames(tmp_path / "switch.bin", to_switch)
        _write_frames(tmp_path / "nic.bin", to_nic)
        leaf_if = leaf.intfs[server.leaf_port].name          # the leaf's end of the server's wire
        server_host, fuzz_host = fab.net.hosts[server.server], fab.net.hosts[fuzzer.server]

        perf = [sys.executable, "-m", "sw.apps.perf_selftest", "--store", str(tmp_path / "store"), "--name", "fuzz",
                "--link-rate", "100M", "--timeout", "120", "--json"]
        server_if0 = _if_stats(server_host, server.ifname)
        procs: list[subprocess.Popen] = []

        def start(node: Any, argv: list[str], **kw: Any) -> subprocess.Popen:
            proc = node.popen(argv, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
            procs.append(proc)
            fab.helper_procs.append(proc)        # the fabric's teardown stops it should the test fail
            return proc

        try:
            srv = start(server_host, [*perf, "server", "--dev", server.ifname, "--size", "1M"], text=True)
            cli = start(fab.net.hosts[client.server], [*perf, "client", "--dev", client.ifname, "--op", "write",
                                                      "--size", "1M", "--iters", "96", "--lat-iters", "0"], text=True)
            senders = {
                "switch": start(fuzz_host, [sys.executable, "-c", SENDER, fuzzer.ifname, str(tmp_path / "switch.bin")],
                                stdin=subprocess.PIPE),
                "nic": start(leaf, [sys.executable, "-c", SENDER, leaf_if, str(tmp_path / "nic.bin")],
                             stdin=subprocess.PIPE),
            }
            for proc in senders.values():
                assert proc.stdout.readline().strip() == b"ready", proc.stderr.read()
            _wait(lambda: fab.port_counters(server.leaf)[server.leaf_port]["tx_pkts"] > 200, 60,
                  "the WRITE's frames on the server's port")
            before = fab.port_counters(server.leaf)
            fuzz_if0 = _if_stats(fuzz_host, fuzzer.ifname)
            sent = {name: [0, 0] for name in senders}
            fuzz_t0 = time.monotonic()
            for _ in range(FRAMES_PER_PATH // BATCH_FRAMES):
                for proc in senders.values():
                    proc.stdin.write(b"%d\n" % BATCH_FRAMES)
                    proc.stdin.flush()
                for name, proc in senders.items():
                    ok, rejected = map(int, proc.stdout.readline().split())
                    sent[name][0] += ok
                    sent[name][1] += rejected
                # pace on the switch: the next batch once it has read this one
                _wait(lambda: (lambda p: p["rx_pkts"] + p["rx_kernel_drops"])(
                    fab.port_counters(server.leaf)[fuzzer.leaf_port]) - before[fuzzer.leaf_port]["rx_pkts"]
                    - before[fuzzer.leaf_port]["rx_kernel_drops"] >= sent["switch"][0], 30, "the switch to read")
            fuzz_s = time.monotonic() - fuzz_t0
            assert cli.poll() is None, f"the WRITE ended before the fuzz did: {cli.stderr.read()[-800:]}"
            out, err = cli.communicate(timeout=180)
            assert cli.returncode == 0, err
            srv_out, srv_err = srv.communicate(timeout=60)
            assert srv.returncode == 0, srv_err
            time.sleep(0.5)                                     # the last forwarded frames leave the switch
            after = fab.port_counters(server.leaf)
            fuzz_if1 = _if_stats(fuzz_host, fuzzer.ifname)
            server_if1 = _if_stats(server_host, server.ifname)
            assert leaf.proc is not None and leaf.proc.poll() is None, "the switch is alive"
        finally:
            for proc in procs:
                stop_proc(proc)
                fab.helper_procs.remove(proc)
    report, served = json.loads(out), json.loads(srv_out)
    assert [r["data_ok"] for r in report["results"]] == [True], "the WRITE completed with exact data"

    # 0 bytes to jumbo; every frame left the sender or was rejected by its kernel (only those shorter than an
    # Ethernet header)
    assert min(map(len, to_switch + to_nic)) == 0 and max(map(len, to_switch + to_nic)) == JUMBO_BYTES
    rejected_ok = {n: sum(1 for f in frames if len(f) < 14) for n, frames in (("switch", to_switch), ("nic", to_nic))}
    for name in senders:
        assert sent[name] == [FRAMES_PER_PATH - rejected_ok[name], rejected_ok[name]], (name, sent[name])

    # switch: every frame the fuzzer's wire carried was read by the switch (or dropped by its socket, counted),
    # and over all ports what came in went out or was dropped for a counted reason
    wire_frames = fuzz_if1["tx_packets"] - fuzz_if0["tx_packets"]
    port = fuzzer.leaf_port
    assert wire_frames >= sent["switch"][0]
    assert _delta(after, before, port, "rx_pkts") + _delta(after, before, port, "rx_kernel_drops") == wire_frames
    rx = sum(_delta(after, before, p, "rx_pkts") for p in after)
    out_or_dropped = sum(_delta(after, before, p, k) for p in after for k in ("tx_pkts", "tx_errors", *DROP_KEYS))
    queued = sum(after[p]["qdepth_pkts"] - before.get(p, {}).get("qdepth_pkts", 0) for p in after)
    assert rx == out_or_dropped + queued, (rx, out_or_dropped, queued, after)
    fuzz_drops = {k: _delta(after, before, port, k) for k in DROP_KEYS}
    assert fuzz_drops["pipeline_error_pkts"] == 0 and sum(fuzz_drops.values()) > 0, fuzz_drops

    # NIC: every frame that reached the server's wire was read by the NIC's socket (or dropped by it, counted),
    # and the NIC counted each frame it read once: by a QP, by PFC, or as a drop with its reason
    nic, port_c = served["nic_counters"], served["port_counters"]
    arrived = server_if1["rx_packets"] - server_if0["rx_packets"]
    read = port_c["rx_frames"] + port_c["not_for_us"] + port_c["outgoing_skipped"] + port_c["rx_kernel_drops"]
    assert arrived >= sent["nic"][0] and read == arrived, (arrived, port_c)
    _assert_counted_once(nic, port_c)
    assert nic["malformed_frames"] > 1000, nic
    # the client's NIC (the WRITE's requester) got what the switch forwarded of the fuzz: counted likewise
    _assert_counted_once(report["nic_counters"], report["port_counters"])
    row = report["results"][0]
    print(json.dumps({"frames_per_path": FRAMES_PER_PATH, "fuzz_s": round(fuzz_s, 1), "sent_ok_rejected": sent,
                      "switch_port_drops": fuzz_drops,
                      "switch_rx_kernel_drops": _delta(after, before, port, "rx_kernel_drops"),
                      "server_nic": nic, "server_port": port_c, "client_nic": report["nic_counters"],
                      "write": {k: row[k] for k in ("size_bytes", "iters", "elapsed_s", "retransmissions")}}))


def _assert_counted_once(nic: dict[str, Any], port: dict[str, int]) -> None:
    """Every frame the NIC's port handed it counts once: by a QP, by PFC, or as a drop with its reason."""
    assert nic["rx_frames"] == port["rx_frames"]
    assert nic["rx_frames"] == (nic["qp_frames"] + nic["pfc_frames"] + nic["unknown_qp_frames"]
                                + nic["non_roce_frames"] + nic["malformed_frames"]), nic
    assert sum(nic["drop_reasons"].values()) == nic["non_roce_frames"] + nic["malformed_frames"], nic
