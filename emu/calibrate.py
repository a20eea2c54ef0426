"""``--time-dilation auto``: bring the fabric up at the lowest dilation whose components keep up with line rate.

Before the measured part: up at dilation k (from 1), reset every switch's lag, offer probe traffic at line rate
in network time for a bounded wall time (``PROBE_WALL_S``) across the fabric, and judge the fidelity of the
switches and link emulators (``sw.clock.lag``).  Not ok: down, raise k by what the lag says it needs
(``next_dilation``: at least ``MIN_STEP``x, ``HEADROOM``x after a marginal miss) and try again, up to the
ceiling; when even the ceiling is not ok, a one-line error.
The run itself keeps reporting its own ``fidelity``, so a machine that gets busier later is still caught.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from emu.fabric import Fabric
from sw.clock import ENV_DILATION, Clock
from sw.clock.lag import CalibrationError, search_dilation
from sw.units import AutoDilation, UnitError, parse_time_dilation

PROBE_WALL_S = 1.0           # wall seconds of line-rate probe traffic per attempt (more at high dilation: below)
PROBE_PAYLOAD_BYTES = 1400   # UDP payload of a probe frame (1442-byte frames, plus INT)
PROBE_MIN_PACKETS = 40       # at least this many frames, however slow line rate is in wall time ...
PROBE_MAX_PACKETS = 4000     # ... and at most this many, however fast (a fast link at a low dilation)
PROBE_GRACE_S = 30.0         # wall seconds the blaster may take beyond its schedule


def resolve_dilation(given: float | AutoDilation | None) -> float | AutoDilation:
    """What a command whose fabric carries traffic runs at: the ``--time-dilation`` given, else an explicit
    $STARPULSE_TIME_DILATION, else ``auto`` (the default where a fabric carries traffic)."""
    if given is not None:
        return given
    raw = os.environ.get(ENV_DILATION)
    if raw is None:
        return AutoDilation()
    try:
        return parse_time_dilation(raw, what=f"${ENV_DILATION}")
    except UnitError as exc:
        raise CalibrationError(str(exc)) from None


def probe_pair(fab: Fabric) -> tuple[str, str]:
    """A source and destination NIC whose path crosses the most switches (cross-rail through a spine if any)."""
    nics = fab.topo.nics
    src = nics[0]
    far = [n for n in nics if n.server != src.server]
    cross = [n for n in far if n.leaf != src.leaf]
    return src.ip, (cross or far or nics[1:])[-1].ip


def probe_fidelity(fab: Fabric) -> dict[str, Any]:
    """Line-rate probe traffic for ``PROBE_WALL_S`` on a fresh lag count; the switches' and emulators' verdict."""
    for name in fab.net.switches:
        fab.switch_cli(name, "lag_stats reset")
    src, dst = probe_pair(fab)
    frame_bits = (PROBE_PAYLOAD_BYTES + 8 + 20 + 14 + 24) * 8
    pps = fab.spec.link_rate_bps / frame_bits                  # line rate, network time
    wall_pps = pps / fab.clock.dilation
    packets = min(PROBE_MAX_PACKETS, max(PROBE_MIN_PACKETS, int(wall_pps * PROBE_WALL_S)))
    server = next(n.server for n in fab.topo.nics if n.ip == src)
    # a blaster only (emu.probe): the frames cross the fabric and die at the destination; no sink to wait for
    blast = fab.net.hosts[server].popen(
        [sys.executable, "-m", "emu.probe", "--blast", str(packets), "--pps", f"{pps:.3f}",
         "--size", str(PROBE_PAYLOAD_BYTES), "--src", src, "--dst", dst],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = blast.communicate(timeout=packets / wall_pps + PROBE_GRACE_S)
    except subprocess.TimeoutExpired:
        blast.kill()
        blast.communicate()
        raise CalibrationError(f"--time-dilation auto: the probe {src} -> {dst} did not finish in time") from None
    if blast.returncode != 0:
        raise CalibrationError(f"--time-dilation auto: the probe {src} -> {dst} failed: "
                               f"{(err or '').strip().splitlines()[-1:]}")
    return fab.fidelity()


def calibrated_fabric(make: Callable[[Clock], Fabric], auto: AutoDilation,
                      echo: Callable[[str], None] | None = None) -> tuple[Fabric, dict[str, Any]]:
    """A fabric that is up at the lowest dilation (1, then raised) whose probe is ok; its calibration verdict.
    Sets $STARPULSE_TIME_DILATION to the dilation chosen (the switches and later processes inherit it)."""
    chosen: list[Fabric] = []

    def attempt(k: float) -> dict[str, Any]:
        os.environ[ENV_DILATION] = repr(k)
        fab = make(Clock(k))
        fab.up()
        try:
            fid = probe_fidelity(fab)
        except BaseException:
            fab.down()
            raise
        if fid["ok"]:
            chosen.append(fab)
        else:
            fab.down()
        return fid

    _, fid = search_dilation(attempt, auto.ceiling, str(auto), echo)
    return chosen[-1], fid


def calibrate_dilation(make: Callable[[Clock], Fabric], auto: AutoDilation,
                       echo: Callable[[str], None] | None = None) -> float:
    """``calibrated_fabric``, then down: the dilation chosen (for a command that builds its own fabric after)."""
    fab, _ = calibrated_fabric(make, auto, echo)
    fab.down()
    return fab.clock.dilation
