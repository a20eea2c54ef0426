"""An incast with ECN and INT: two senders in pod 0 blast one receiver in pod 1 while probes read the INT hop
records of the congested path, and the script prints the queue depth each switch reported per hop.

    s0 --+                              +-- s2 (receiver)
         [p0l0] -- [sp0] -- [p1l0] ----+
    s1 --+                              +-- s3

    sudo .venv/bin/python examples/incast_int.py
"""

import sys

from emu.fabric import Fabric
from emu.traffic import ProbeSession

PACKETS, PPS, PAYLOAD_BYTES = 1200, 600, 1200   # per sender: ~6 Mb/s, two into one 10 Mb/s port, for 2 s


def main() -> int:
    try:
        with Fabric(servers=4, pods=2, gpus_per_server=1, spines=1, link_rate="10M") as fab:
            ip = {n.server: n.ip for n in fab.topo.nics}
            names = {sw.device_id: sw.name for sw in fab.topo.switches}
            deepest: dict[int, tuple[str, int]] = {}    # hop number -> (switch, deepest queue seen)
            # a probe s2 -> s0 is answered s0 -> s2: the answer crosses the incast's path and brings its INT stack
            with ProbeSession(fab, [(ip["s2"], ip["s0"])]) as probes:
                for src in ("s0", "s1"):   # paced ECN-capable UDP, in the background of each sender's shell
                    fab.run(src, f"{sys.executable} -m emu.probe --blast {PACKETS} --pps {PPS} --size "
                                 f"{PAYLOAD_BYTES} --ecn --src {ip[src]} --dst {ip['s2']} --port 5000 >/dev/null &")
                end_ns = fab.clock.now_ns() + PACKETS * 10**9 // PPS
                while fab.clock.now_ns() < end_ns:   # probe rounds while the queue is full (some replies drop)
                    (r,) = probes.run([(ip["s2"], ip["s0"])], timeout_ms=200, retries=3)
                    for n, hop in enumerate(reversed(r.get("rev_int", [])), 1):   # the stack is last hop first
                        depth = hop["queue_occupancy_pkts"]
                        if depth >= deepest.get(n, ("", -1))[1]:
                            deepest[n] = (names.get(hop["node_id"], str(hop["node_id"])), depth)
                for src in ("s0", "s1"):
                    fab.run(src, "wait")   # the blasts end
            print("s0 -> s2 INT hops (deepest queue the probes saw):")
            for n, (switch, depth) in sorted(deepest.items()):
                print(f"  hop {n} {switch:<5} queue {depth} pkts")
            port = fab.port_counters("p1l0")[fab.topo.nics_of("s2")[0].leaf_port]
            totals = fab.status()["totals"]
            print(f"p1l0 -> s2: tx {port['tx_pkts']} packets; switch totals: ECN marks {totals['ecn_marks']}, "
                  f"drops {totals['drops']}")
            return 0 if len(deepest) == 3 and totals["ecn_marks"] > 0 else 1
    except KeyboardInterrupt:
        print("interrupted: fabric torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
