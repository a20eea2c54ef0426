"""A multi-rail fabric from the Python API and an allreduce between its GPU ranks (RoCE on each rank's rail NIC).

The script is both ends: run by you, it brings the fabric up and launches itself once per rank (as
`starpulse run` would); run as a rank (RANK in the environment), it joins the collective.

    sudo .venv/bin/python examples/fabric_allreduce.py [--name NAME]
"""

import os
import sys

import numpy as np

N = 1 << 18   # float32 elements per rank (1 MiB)


def rank_main() -> None:
    from sw.collectives import init_from_env

    comm = init_from_env()
    grads = np.full(N, comm.rank + 1, dtype=np.float32)
    comm.allreduce(grads, op="sum", algo="hier")           # rail-aware: inside servers, then across each rail
    n = comm.world_size
    assert (grads == n * (n + 1) / 2).all()
    print(f"rank {comm.rank}/{n} on {os.environ['STARPULSE_NIC_ADDR']}: allreduce ok ({comm.last_choice[0]})")
    comm.close()


def main() -> int:
    from emu.fabric import Fabric

    name = sys.argv[sys.argv.index("--name") + 1] if "--name" in sys.argv else None
    try:
        # 2 servers x 2 GPUs: rails 0 and 1, one leaf per rail, one spine; `starpulse fabric status --name NAME`
        # reaches it from another shell while it runs (name=None keeps it private to this script)
        with Fabric(servers=2, gpus_per_server=2, spines=1, link_rate="100M", name=name) as fab:
            print(f"fabric up in {fab.timings.up_s:.1f} s: {len(fab.topo.nics)} NICs on "
                  f"{fab.spec.rails} rails", flush=True)
            job = fab.launch([sys.executable, os.path.abspath(__file__)], timeout_s=120)
            drops = fab.status()["totals"]["drops"]
            print(f"ranks done: exit {job.exit_code}, switch drops {drops}")
            return job.exit_code
    except KeyboardInterrupt:   # Ctrl-C: the ranks were stopped and the with block tore the fabric down
        print("interrupted: fabric torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main()
    else:
        sys.exit(main())
