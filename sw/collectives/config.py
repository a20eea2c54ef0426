"""Communicator settings and their environment variables (validated: a bad value names the variable)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sw.units import UnitError, parse_duration_ns, parse_rate_bps, parse_size_bytes

from .errors import CollectiveUserError

ENV_STORE = "STARPULSE_STORE"
ENV_TIMEOUT = "STARPULSE_TIMEOUT"
ENV_INTRA_RATE = "STARPULSE_INTRA_RATE"
ENV_INTER_RATE = "STARPULSE_INTER_RATE"
ENV_SHM_BYTES = "STARPULSE_SHM_BYTES"
ENV_NIC_ADDR = "STARPULSE_NIC_ADDR"
ENV_SERVER = "STARPULSE_SERVER"
ENV_CALIBRATE = "STARPULSE_CALIBRATE"
ENV_NET = "STARPULSE_NET"
ENV_ROCE_CC = "STARPULSE_ROCE_CC"
ENV_ROCE_BASE_RTT = "STARPULSE_ROCE_BASE_RTT"
"""The fabric's base round trip in network ns (``emu.launch.fabric_env``): HPCC's T on top of the stack's own."""
NETS = ("tcp", "roce")
"""Inter-server transports ($STARPULSE_NET, like NCCL_NET): TCP sockets, or RoCEv2 RC QPs on the rail NIC."""
ROCE_CCS = ("dcqcn", "hpcc", "none")
"""Congestion control of the RoCE transport's QPs ($STARPULSE_ROCE_CC): DCQCN (ECN -> CNPs), HPCC (INT the P4
fabric stamps, echoed in ACKs) or none (line rate)."""
ROCE_CC_HELP = ("congestion control of the ranks' RoCE QPs: dcqcn (ECN marks -> CNPs), hpcc (the fabric's INT "
                f"echoed in ACKs) or none (default: ${ENV_ROCE_CC}, else dcqcn)")
"""``--roce-cc``'s help, one text for every command that has the flag (``run``, ``bench``, ``train``)."""

DEFAULT_INTRA_RATE_BPS = 20e9
"""Shared-memory (NVLink stand-in) egress per rank outside a fabric job (no rail rate to scale from): a Python
memcpy sustains it on one core, so the throttle and not the copy sets the pace."""
DEFAULT_INTRA_RATIO = 9.0
"""Inside a fabric job the NVLink stand-in runs at this multiple of the per-rail link rate (the launcher exports
$STARPULSE_INTRA_RATE): a DGX-class server's NVLink per GPU over its NIC per GPU, e.g. H100 450 GB/s per
direction vs a 400 Gb/s NIC (~9x; counting both directions, 900 GB/s, it is ~18x)."""
DEFAULT_INTER_MODEL_RATE_BPS = 1e9
"""Rail rate the cost model assumes until calibrated, when TCP is not throttled (the fabric sets the pace)."""
DEFAULT_ALPHA_INTRA_S = 20e-6
DEFAULT_ALPHA_INTER_S = 60e-6
"""Per-message latencies of this Python stack (start values of the model; ``calibrate`` measures them)."""


@dataclass(frozen=True)
class CommConfig:
    """Per-communicator settings; ``None`` rates mean unthrottled."""

    timeout_s: float = 60.0
    intra_rate_bps: float | None = DEFAULT_INTRA_RATE_BPS
    inter_rate_bps: float | None = None
    shm_ring_bytes: int = 1 << 20
    nic_addr: str = "127.0.0.1"
    calibrate: bool = False
    net: str = "tcp"
    roce_cc: str = "dcqcn"
    roce_base_rtt_ns: int = 0
    """The fabric's unloaded round trip (network ns; 0: unknown), part of HPCC's base RTT."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> CommConfig:
        """Settings from STARPULSE_TIMEOUT, _INTRA_RATE, _INTER_RATE, _SHM_BYTES, _NIC_ADDR, _CALIBRATE, _NET,
        _ROCE_CC, _ROCE_BASE_RTT (``env``, default ``os.environ``); a bad value raises ``CollectiveUserError``
        naming it."""
        env = dict(os.environ) if env is None else env
        kw: dict[str, object] = {}
        if env.get(ENV_TIMEOUT):
            kw["timeout_s"] = _positive_float(env[ENV_TIMEOUT], ENV_TIMEOUT)
        if env.get(ENV_INTRA_RATE):
            kw["intra_rate_bps"] = _rate_or_off(env[ENV_INTRA_RATE], f"${ENV_INTRA_RATE}")
        if env.get(ENV_INTER_RATE):
            kw["inter_rate_bps"] = _rate_or_off(env[ENV_INTER_RATE], f"${ENV_INTER_RATE}")
        if env.get(ENV_SHM_BYTES):
            try:
                size = parse_size_bytes(env[ENV_SHM_BYTES], what=f"${ENV_SHM_BYTES}")
            except UnitError as exc:
                raise CollectiveUserError(str(exc)) from None
            if size < 4096:
                raise CollectiveUserError(f"${ENV_SHM_BYTES}={env[ENV_SHM_BYTES]!r}: must be at least 4K")
            kw["shm_ring_bytes"] = size
        if env.get(ENV_NIC_ADDR):
            kw["nic_addr"] = env[ENV_NIC_ADDR]
        if env.get(ENV_CALIBRATE):
            raw = env[ENV_CALIBRATE].strip().lower()
            if raw not in ("0", "1", "yes", "no", "true", "false"):
                raise CollectiveUserError(f"${ENV_CALIBRATE}={env[ENV_CALIBRATE]!r}: expected 0 or 1")
            kw["calibrate"] = raw in ("1", "yes", "true")
        for var, field, allowed in ((ENV_NET, "net", NETS), (ENV_ROCE_CC, "roce_cc", ROCE_CCS)):
            if env.get(var):
                raw = env[var].strip().lower()
                if raw not in allowed:
                    raise CollectiveUserError(f"${var}={env[var]!r}: expected one of {', '.join(allowed)}")
                kw[field] = raw
        if env.get(ENV_ROCE_BASE_RTT):
            kw["roce_base_rtt_ns"] = _base_rtt_ns(env[ENV_ROCE_BASE_RTT])
        return cls(**kw)


def _positive_float(raw: str, var: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CollectiveUserError(f"${var}={raw!r}: expected a number of seconds > 0")
    return value


MAX_BASE_RTT_NS = 10_000_000_000


def _base_rtt_ns(raw: str) -> int:
    """$STARPULSE_ROCE_BASE_RTT: a duration ('520us'; a bare number is ns) within 0..10 s."""
    try:
        return parse_duration_ns(raw, what=f"${ENV_ROCE_BASE_RTT}", max_ns=MAX_BASE_RTT_NS)
    except UnitError:
        raise CollectiveUserError(f"${ENV_ROCE_BASE_RTT}={raw!r}: expected a duration within 0..10 s of network "
                                  "time, like 520us (a bare number is ns)") from None


def _rate_or_off(raw: str, what: str, also: str = " or 'off'") -> float | None:
    """A rate ('900M') or 'off'/'0'/'none' (None: unthrottled); ``also`` ends the error's list of accepted forms."""
    if raw.strip().lower() in ("off", "0", "none"):
        return None
    try:
        return float(parse_rate_bps(raw, what=what))
    except UnitError as exc:
        raise CollectiveUserError(f"{exc}{also}") from None


def intra_rate_for(raw: str | None, link_rate_bps: float, what: str = "--intra-rate") -> float | None:
    """The NVLink stand-in rate of a job on links of ``link_rate_bps``: ``raw`` is a rate ('900M'), a multiple
    of the link rate ('9x'), 'off' (unthrottled, returns None) or None/'' (``DEFAULT_INTRA_RATIO`` x link)."""
    text = (raw or "").strip().lower()
    if not text:
        return DEFAULT_INTRA_RATIO * link_rate_bps
    if text.endswith("x"):
        try:
            ratio = float(text[:-1])
        except ValueError:
            ratio = -1.0
        if not ratio > 0:
            raise CollectiveUserError(f"{what} {raw!r}: expected a rate like 900M, a multiple of the link rate "
                                      "like 9x (> 0), or 'off'")
        return ratio * link_rate_bps
    return _rate_or_off((raw or "").strip(), what, ", a multiple of the link rate like 9x, or 'off'")


def env_int(env: dict[str, str], var: str, *, minimum: int, default: int | None = None) -> int:
    """An integer environment variable (RANK, WORLD_SIZE, ...) with a clear error when missing or bad."""
    raw = env.get(var)
    if raw is None or raw.strip() == "":
        if default is not None:
            return default
        raise CollectiveUserError(f"${var} is not set (the launcher sets RANK, WORLD_SIZE, LOCAL_RANK, "
                                  f"LOCAL_WORLD_SIZE and {ENV_STORE})")
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise CollectiveUserError(f"${var}={raw!r}: expected an integer >= {minimum}")
    return value
