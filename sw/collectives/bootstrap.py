"""Bootstrap of a communicator through the file store: ranks publish where they sit and listen, then set up
shared-memory rings with the ranks of their server and TCP connections (or RoCE RC QPs, $STARPULSE_NET=roce)
with the others.

Environment contract as torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, plus STARPULSE_STORE (a
fresh shared directory per job) and optionally STARPULSE_NIC_ADDR, STARPULSE_SERVER and the STARPULSE_*
settings of ``CommConfig``/``Tuner``.
"""

from __future__ import annotations

import hashlib
import os
import secrets

from sw.clock import Clock, get_clock

from .comm import Communicator
from .config import (
    DEFAULT_ALPHA_INTER_S,
    DEFAULT_ALPHA_INTRA_S,
    DEFAULT_INTER_MODEL_RATE_BPS,
    DEFAULT_INTRA_RATE_BPS,
    ENV_SERVER,
    ENV_STORE,
    NETS,
    CommConfig,
    env_int,
)
from .errors import CollectiveUserError
from .rank_layout import RankLayout
from .router import Net
from .store import CollectiveStore
from .transport.base import Transport
from .transport.roce import RoceTransport
from .transport.shm import ShmTransport
from .transport.tcp import TcpTransport, listen
from .tuner import CostModel, LinkCost, Tuner


def default_model(config: CommConfig) -> CostModel:
    """The cost model before calibration: configured rates, typical per-message latencies of this stack."""
    intra_bps = config.intra_rate_bps or DEFAULT_INTRA_RATE_BPS
    inter_bps = config.inter_rate_bps or DEFAULT_INTER_MODEL_RATE_BPS
    return CostModel(LinkCost(DEFAULT_ALPHA_INTRA_S, intra_bps), LinkCost(DEFAULT_ALPHA_INTER_S, inter_bps))


def job_digest(store_path: str, name: str = "world") -> str:
    """Prefix of this job's shared-memory file names (from the store path and communicator name)."""
    return hashlib.sha1(f"{os.path.realpath(store_path)}/{name}".encode()).hexdigest()[:8]


def init_communicator(rank: int, world_size: int, store_path: str, *, server: int, local_rank: int,
                      config: CommConfig | None = None, name: str = "world", env: dict[str, str] | None = None,
                      clock: Clock | None = None, local_world_size: int | None = None) -> Communicator:
    """Collective over ``world_size`` processes: returns this rank's communicator once every rank is connected.

    ``store_path`` is a directory every rank sees (fresh per job); ``server`` and ``local_rank`` place the rank
    (ranks of one server share memory, the others meet over ``config.net``: 'tcp' or 'roce').  Raises
    ``CollectiveUserError`` for inconsistent arguments and ``CollectiveTimeoutError`` when a rank never shows up
    within ``config.timeout_s``."""
    config = config or CommConfig()
    clock = clock or get_clock()
    if not 0 <= rank < world_size:
        raise CollectiveUserError(f"RANK={rank}: expected 0..{world_size - 1} for WORLD_SIZE={world_size}")
    store = CollectiveStore(store_path, timeout_s=config.timeout_s, clock=clock)
    key = f"{name}/"
    if rank == 0:
        store.set(key + "job", secrets.token_hex(4))
    job = f"{job_digest(store_path, name)}-{store.wait(key + 'job')}"

    if config.net not in NETS:
        raise CollectiveUserError(f"inter-server transport {config.net!r}: expected one of {', '.join(NETS)}")
    listener = listen(config.nic_addr) if world_size > 1 and config.net == "tcp" else None
    port = listener.getsockname()[1] if listener else 0
    me = {"server": server, "local_rank": local_rank, "addr": config.nic_addr, "port": port, "pid": os.getpid()}
    store.set(f"{key}info/{rank}", me)
    infos = [store.wait(f"{key}info/{r}") for r in range(world_size)]
    layout = RankLayout(tuple(i["server"] for i in infos), tuple(i["local_rank"] for i in infos))
    if local_world_size is not None and len(layout.local_ranks(server)) != local_world_size:
        if listener is not None:
            listener.close()
        raise CollectiveUserError(f"LOCAL_WORLD_SIZE={local_world_size}, but server {server} has "
                                  f"{len(layout.local_ranks(server))} ranks")

    closers = []
    transports: list[Transport] = []
    try:
        local_peers = [r for r in layout.local_ranks(server) if r != rank]
        incoming = ShmTransport.create_incoming(job, rank, local_peers, config.shm_ring_bytes)
        try:
            store.barrier(key + "shm-created", world_size)
            pids = {r: infos[r]["pid"] for r in local_peers}
            shm = ShmTransport.attach(job, rank, incoming, config.shm_ring_bytes, config.intra_rate_bps, clock, pids)
            store.barrier(key + "shm-attached", world_size)
        finally:
            ShmTransport.unlink_incoming(incoming)
        transports.append(shm)
        closers.append(shm.close)
        remote = {r: (infos[r]["addr"], infos[r]["port"]) for r in range(world_size)
                  if layout.server_of[r] != server}
        if config.net == "roce" and remote:
            roce = RoceTransport.connect(rank, world_size, sorted(remote), store, key, nic_addr=config.nic_addr,
                                         line_rate_bps=config.inter_rate_bps, cc=config.roce_cc,
                                         timeout_s=config.timeout_s, clock=clock,
                                         fabric_rtt_ns=config.roce_base_rtt_ns)
            transports.append(roce)
            closers.append(roce.close)
        if listener is not None:
            tcp = TcpTransport.connect(rank, listener, remote, config.timeout_s, config.inter_rate_bps, clock)
            listener = None
            transports.append(tcp)
            closers.append(tcp.close)
        store.barrier(key + "ready", world_size)
    except BaseException:
        if listener is not None:
            listener.close()
        for close in closers:
            close()
        raise
    net = Net(rank, layout, transports, config.timeout_s, clock)
    comm = Communicator(rank, layout, net, Tuner(layout, default_model(config), env), closers)
    if config.calibrate:
        from .cost_calibrate import calibrate
        calibrate(comm)
    return comm


def init_from_env(env: dict[str, str] | None = None, config: CommConfig | None = None) -> Communicator:
    """The communicator of a rank started by a launcher (``starpulse run``, torchrun-style variables).

    Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and STARPULSE_STORE from ``env`` (default
    ``os.environ``), optionally STARPULSE_SERVER / GROUP_RANK, and the settings of ``CommConfig.from_env`` (or
    ``config``); see ``help(sw.collectives)`` for every variable.  A missing or bad variable raises
    ``CollectiveUserError`` naming it; ranks that never show up raise ``CollectiveTimeoutError``."""
    env = dict(os.environ) if env is None else env
    rank = env_int(env, "RANK", minimum=0)
    world = env_int(env, "WORLD_SIZE", minimum=1)
    local_rank = env_int(env, "LOCAL_RANK", minimum=0)
    local_world = env_int(env, "LOCAL_WORLD_SIZE", minimum=1)
    if local_rank >= local_world:
        raise CollectiveUserError(f"$LOCAL_RANK={local_rank}: expected 0..{local_world - 1} "
                                  f"for LOCAL_WORLD_SIZE={local_world}")
    store_path = env.get(ENV_STORE, "").strip()
    if not store_path:
        raise CollectiveUserError(f"${ENV_STORE} is not set: point it at a fresh directory shared by all ranks")
    server_default = env_int(env, "GROUP_RANK", minimum=0, default=rank // local_world)
    server = env_int(env, ENV_SERVER, minimum=0, default=server_default)
    return init_communicator(rank, world, store_path, server=server, local_rank=local_rank,
                             config=config or CommConfig.from_env(env), env=env, local_world_size=local_world)
