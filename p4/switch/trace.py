"""The switch's log: events at info level, a per-packet trace at ``trace`` level, to a file or stderr."""

from __future__ import annotations

import logging
import sys

TRACE = 5
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR, "off": logging.CRITICAL + 10}
logging.addLevelName(TRACE, "TRACE")


def make_logger(name: str, level: str = "info", log_file: str | None = None) -> logging.Logger:
    """A logger of its own (no propagation) writing ``time level message`` lines to ``log_file`` or stderr."""
    log = logging.getLogger(f"starpulse.p4switch.{name}")
    log.propagate = False
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    handler: logging.Handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(message)s", "%H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(LEVELS[level])
    return log


def frame_summary(frame: bytes) -> str:
    """A one-line, dependency-free summary for the trace: length, MACs, EtherType and the first bytes."""
    if len(frame) < 14:
        return f"{len(frame)} B (runt) {frame.hex()}"
    dst, src, etype = frame[0:6].hex(":"), frame[6:12].hex(":"), frame[12:14].hex()
    return f"{len(frame)} B {src} > {dst} type 0x{etype} {frame[14:46].hex()}"
