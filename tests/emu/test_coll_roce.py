"""Collectives over the RoCE transport ($STARPULSE_NET=roce) between namespaces: 2 servers x 2 rails, every rail
NIC a shaped veth into a bridge, ranks as processes in their server's namespace.  Results exact against numpy,
busbw measured against the link rate, and one capture dissected by tshark as RoCEv2 with no TCP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from emu.netns import NetnsLab
from sw.collectives.config import CommConfig
from sw.collectives.errors import CollectiveUserError

pytestmark = pytest.mark.emu

SERVERS, RAILS = 2, 2
WORLD = SERVERS * RAILS
LINK_RATE_BPS = 100_000_000
BENCH_BYTES = 4 << 20
REPO = Path(__file__).resolve().parents[2]

RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from sw.clock import get_clock
    from sw.collectives import init_from_env

    out, bench_bytes = sys.argv[1], int(sys.argv[2])
    comm = init_from_env()
    rank, n = comm.rank, comm.world_size
    rng = np.random.default_rng(1000 + rank)
    ar_i32 = rng.integers(-2**20, 2**20, 100_003, dtype=np.int32)
    ar_f32 = rng.integers(-1000, 1000, 77_777).astype(np.float32)  # integers: float sums exact in any order
    ag_i32 = rng.integers(0, 2**31 - 1, 12_345, dtype=np.int32)
    a2a_i64 = rng.integers(-2**40, 2**40, n * 5_001, dtype=np.int64)
    got = {
        "ar_i32": comm.allreduce(ar_i32.copy()),
        "ar_f32_max": comm.allreduce(ar_f32, np.empty_like(ar_f32), op="max"),
        "ar_f32_ring": comm.allreduce(ar_f32.copy(), algo="ring"),
        "ag_i32": comm.allgather(ag_i32),
        "a2a_i64": comm.alltoall(a2a_i64, np.empty_like(a2a_i64)),
    }
    bench = np.ones(bench_bytes // 4, np.float32)
    comm.allreduce(bench, algo="ring")  # warm-up
    comm.barrier()
    clock = get_clock()
    t0 = clock.now_ns()
    comm.allreduce(bench, algo="ring")
    elapsed_ns = clock.now_ns() - t0
    ok = bool(np.all(bench == n * n))
    if rank == 0:
        time.sleep(1.0)  # the others wait in the barrier meanwhile: how much CPU does an idle wait burn?
    cpu0, wall0 = time.process_time(), time.monotonic()
    comm.barrier()
    idle_cpu = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    roce = next(t for t in comm.net.transports if t.name == "roce")
    qp = roce.nic.qp_counters()
    np.savez(f"{out}/rank{rank}.npz", **got)
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump({"elapsed_ns": elapsed_ns, "bench_ok": ok, "idle_cpu": idle_cpu,
                   "retransmitted": qp["retransmitted_packets"], "timeouts": qp["timeouts"]}, fh)
    comm.close()
""")


def _expected(rank: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 + rank)
    return {
        "ar_i32": rng.integers(-2**20, 2**20, 100_003, dtype=np.int32),
        "ar_f32": rng.integers(-1000, 1000, 77_777).astype(np.float32),
        "ag_i32": rng.integers(0, 2**31 - 1, 12_345, dtype=np.int32),
        "a2a_i64": rng.integers(-2**40, 2**40, WORLD * 5_001, dtype=np.int64),
    }


def _fabric(lab: NetnsLab, rails: int = RAILS) -> tuple[list, object]:
    """Servers with one NIC per rail (10.79.<rail>.<server+1>/16), all veths into one bridge, every port shaped."""
    switch = lab.add_host("sw")
    switch.cmd("ip", "link", "add", "br0", "type", "bridge")
    servers = [lab.add_host(f"s{s}") for s in range(SERVERS)]
    for s, host in enumerate(servers):
        for g in range(rails):
            port = f"s{s}r{g}"
            lab.add_link(host, switch, ifname_a=f"rail{g}", ifname_b=port, addr_a=f"10.79.{g}.{s + 1}/16", mtu=9000)
            switch.cmd("ip", "link", "set", port, "master", "br0")
            lab.shape_rate(host, f"rail{g}", LINK_RATE_BPS, burst_bytes=64 * 1024)
            lab.shape_rate(switch, port, LINK_RATE_BPS, burst_bytes=64 * 1024)
    switch.cmd("ip", "link", "set", "br0", "up")
    return servers, switch


def _rank_env(rank: int, rails: int, store: Path, *, timeout_s: float) -> dict[str, str]:
    """The launcher's contract for one rank, with the RoCE transport selected and the rail rate as line rate."""
    s, g = divmod(rank, rails)
    return dict(os.environ, PYTHONPATH=str(REPO), RANK=str(rank), WORLD_SIZE=str(SERVERS * rails),
                LOCAL_RANK=str(g), LOCAL_WORLD_SIZE=str(rails), STARPULSE_STORE=str(store), STARPULSE_SERVER=str(s),
                STARPULSE_NIC_ADDR=f"10.79.{g}.{s + 1}", STARPULSE_NET="roce", STARPULSE_TIMEOUT=str(timeout_s),
                STARPULSE_INTER_RATE=str(LINK_RATE_BPS))


def test_collectives_exact_over_roce_with_busbw_and_rocev2_on_the_wire(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    store = tmp_path / "store"
    pcap = tmp_path / "s0r0.pcap"
    with NetnsLab() as lab:
        servers, switch = _fabric(lab)
        dump = switch.popen(["tcpdump", "-i", "s0r0", "-U", "-s", "128", "-B", "65536", "-w", str(pcap)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # test set-up, not the data path: let tcpdump attach before traffic starts
        procs = []
        for rank in range(WORLD):
            s, g = divmod(rank, RAILS)
            env = _rank_env(rank, RAILS, store, timeout_s=60)
            procs.append(servers[s].popen([sys.executable, str(script), str(tmp_path), str(BENCH_BYTES)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [p.communicate(timeout=150)[0] for p in procs]
        for rank, (p, text) in enumerate(zip(procs, outputs, strict=True)):
            assert p.returncode == 0, f"rank {rank} failed:\n{text}"
        time.sleep(1.0)  # let tcpdump write the last frames before it is stopped
        dump.terminate()
        _, dump_err = dump.communicate(timeout=10)
    exp = [_expected(r) for r in range(WORLD)]
    ar_i32 = np.sum([e["ar_i32"] for e in exp], axis=0, dtype=np.int32)
    ar_f32 = np.sum([e["ar_f32"] for e in exp], axis=0, dtype=np.float32)
    ar_max = np.max([e["ar_f32"] for e in exp], axis=0)
    ag = np.concatenate([e["ag_i32"] for e in exp])
    infos = []
    for rank in range(WORLD):
        got = np.load(tmp_path / f"rank{rank}.npz")
        assert np.array_equal(got["ar_i32"], ar_i32), f"rank {rank}: int32 allreduce differs"
        assert np.array_equal(got["ar_f32_ring"], ar_f32), f"rank {rank}: float32 ring allreduce differs"
        assert np.array_equal(got["ar_f32_max"], ar_max), f"rank {rank}: float32 max allreduce differs"
        assert np.array_equal(got["ag_i32"], ag), f"rank {rank}: allgather differs"
        a2a = np.concatenate([e["a2a_i64"].reshape(WORLD, -1)[rank] for e in exp])
        assert np.array_equal(got["a2a_i64"], a2a), f"rank {rank}: alltoall differs"
        infos.append(json.loads((tmp_path / f"rank{rank}.json").read_text()))
    assert all(i["bench_ok"] for i in infos)
    elapsed_s = max(i["elapsed_ns"] for i in infos) / 1e9
    busbw_bps = BENCH_BYTES * 8 / elapsed_s * 2 * (WORLD - 1) / WORLD
    print(f"\nRoCE ring allreduce {BENCH_BYTES >> 20} MiB on {WORLD} ranks: {elapsed_s:.3f} s, busbw "
          f"{busbw_bps / 1e6:.1f} Mb/s = {busbw_bps / LINK_RATE_BPS:.2f} of the {LINK_RATE_BPS / 1e6:g} Mb/s link; "
          f"CPU while idle in a barrier: {max(i['idle_cpu'] for i in infos[1:]):.0%} of a core at most; "
          f"retransmitted packets {sum(i['retransmitted'] for i in infos)}, "
          f"ACK timeouts {sum(i['timeouts'] for i in infos)}")
    assert busbw_bps > 0
    out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.protocols", "-e",
                          "infiniband.bth.opcode"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines() if line.strip()]
    udp_rows = [r for r in rows if ":ip:udp:" in r[0]]
    assert udp_rows, f"no UDP frames captured ({dump_err.strip()})"
    assert not [r for r in rows if ":tcp" in r[0]], "collective bytes went over TCP"
    # tshark may dissect SEND payload heuristically further; what matters is that UDP carries InfiniBand (RoCEv2)
    assert all(":ip:udp:infiniband" in r[0] for r in udp_rows), sorted({r[0] for r in udp_rows})
    opcodes = {int(r[1], 0) for r in udp_rows if len(r) > 1 and r[1]}
    # SEND FIRST/MIDDLE/LAST/ONLY carry the data, RDMA WRITE ONLY the credits, ACK the RC acknowledgements
    assert {0x00, 0x01, 0x02, 0x04, 0x0A, 0x11} <= opcodes, sorted(opcodes)
    print(f"capture on s0r0: {len(udp_rows)} UDP frames, all RoCEv2; BTH opcodes {sorted(opcodes)}")


@pytest.mark.parametrize("var, value", [("STARPULSE_NET", "ib"), ("STARPULSE_ROCE_CC", "timely")])
def test_bad_transport_settings_name_the_variable(var, value):
    with pytest.raises(CollectiveUserError, match=rf"\${var}='{value}'"):
        CommConfig.from_env({var: value})


DEAD_PEER_SCRIPT = textwrap.dedent("""
    import numpy as np
    from sw.collectives import init_from_env

    comm = init_from_env()
    if comm.rank == 1:
        raise SystemExit(0)  # leaves without closing: its QP never answers again
    try:
        comm.allreduce(np.ones(1 << 16, np.float32))
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
        raise SystemExit(3)
""")


def test_a_vanished_peer_fails_the_collective_with_a_clear_error(tmp_path):
    script = tmp_path / "dead.py"
    script.write_text(DEAD_PEER_SCRIPT)
    with NetnsLab() as lab:
        servers, _ = _fabric(lab, rails=1)
        procs = [servers[rank].popen([sys.executable, str(script)], env=_rank_env(rank, 1, tmp_path / "store",
                                                                                  timeout_s=10),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in range(SERVERS)]
        outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert procs[1].returncode == 0, outputs[1]
    assert procs[0].returncode == 3, outputs[0]
    assert "PeerGoneError: rank 0: RoCE QP" in outputs[0] or "CollectiveTimeoutError" in outputs[0], outputs[0]
    print(f"\nrank 0 saw: {outputs[0].strip()}")


PROGRESS_SCRIPT = textwrap.dedent("""
    import sys, threading, time
    from pathlib import Path
    import numpy as np
    from sw.collectives import init_from_env
    from sw.collectives.errors import PeerGoneError
    from sw.collectives.transport.roce import RECV_SLOTS, SLOT_BYTES
    from sw.roce.transport.qp import QpState

    flags = Path(sys.argv[1])
    comm = init_from_env()
    big = np.arange(3 * RECV_SLOTS * SLOT_BYTES // 8, dtype=np.int32)  # 1.5x the receives rank 1 keeps posted
    tail = np.arange(1 << 18, dtype=np.int32)  # 1 MiB: its send returns while the last frames still wait to leave

    def compute_until(name):
        # user code, no library call: only the communicator's progress engine can answer the peer meanwhile
        for _ in range(600):
            if (flags / name).exists():
                return
            time.sleep(0.1)
        print(f"rank {comm.rank}: the peer never got to {name!r} while this rank computed")
        raise SystemExit(4)

    if comm.rank == 0:
        comm.send(big, peer=1)  # completes only if rank 1's NIC acknowledges and returns credits
        (flags / "sent").touch()
        got = np.empty_like(tail)
        comm.recv(got, peer=1)
        assert np.array_equal(got, tail), "tail differs"
        (flags / "got").touch()
        compute_until("gone")
        comm.send(np.ones(4096, np.int32), peer=1)  # staged at once; the dead peer never acknowledges it
        roce = next(t for t in comm.net.transports if t.name == "roce")
        # computing (no library call) while the engine retries and gives up on the QP (~102 s network, 10.2 s
        # wall): until a QP is in ERROR, not a fixed 15 s
        for _ in range(300):
            if any(qp.state == QpState.ERROR for qp in list(roce.nic.qps.values())):
                break
            time.sleep(0.1)
        print(f"ACK timeouts while computing: {roce.nic.qp_counters()['timeouts']}")
        try:
            comm.barrier()
        except PeerGoneError as exc:
            print(f"next call raised PeerGoneError: {exc}")
        comm.close()
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        print(f"threads left after close: {left}")
        raise SystemExit(0 if not left else 5)
    compute_until("sent")
    got = np.empty_like(big)
    comm.recv(got, peer=0)
    assert np.array_equal(got, big), "big message differs"
    comm.send(tail, peer=0)
    compute_until("got")
    (flags / "gone").touch()
    import os
    os._exit(0)  # vanishes without closing: its QP never answers again
""")


def test_a_computing_rank_still_answers_its_peers_and_errors_reach_the_next_call(tmp_path):
    """Rank 1 sits in user code while rank 0 sends more than its posted receives (its NIC must acknowledge and
    return credits), then computes while its own last frames are still queued; both only finish with a progress
    engine outside library calls.  A peer lost while idle fails the next call; close leaves no thread behind."""
    script = tmp_path / "progress.py"
    script.write_text(PROGRESS_SCRIPT)
    flags = tmp_path / "flags"
    flags.mkdir()
    # network time 10x faster than wall time (a 10 Mb/s NIC on the 100 Mb/s veth): the QP to the vanished peer
    # exhausts its retries (~102 s of network time) within seconds
    with NetnsLab() as lab:
        servers, _ = _fabric(lab, rails=1)
        procs = [servers[rank].popen([sys.executable, str(script), str(flags)],
                                     env=_rank_env(rank, 1, tmp_path / "store", timeout_s=20)
                                     | {"STARPULSE_TIME_DILATION": "0.1", "STARPULSE_INTER_RATE": "10M"},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in range(SERVERS)]
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[1].returncode == 0, outputs[1]
    assert procs[0].returncode == 0, outputs[0]
    timeouts = int(outputs[0].split("ACK timeouts while computing: ")[1].split()[0])
    assert timeouts > 0, f"no retransmission timer fired while rank 0 computed:\n{outputs[0]}"
    assert "next call raised PeerGoneError: rank 0: RoCE QP" in outputs[0], outputs[0]
    assert "threads left after close: []" in outputs[0], outputs[0]
    print(f"\n{outputs[0].strip()}")
