"""Rendezvous key-value store in a shared directory (like torch's FileStore): JSON values, atomic-rename writes,
polled reads.

Hosts in network namespaces share the file system, so one directory bootstraps every end of a job (QP set-up,
the benches' ranks, the collectives).  Keys map to file names (percent-quoted); ``add`` is serialised with an
fcntl lock so counters are exact.  A leaf: it imports only ``sw.clock``.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

from sw.clock import Clock, get_clock

DEFAULT_TIMEOUT_S = 60.0


class StoreError(RuntimeError):
    """A store directory that cannot be used, or a key that never appeared in time."""

    is_user_error = True


class StoreTimeoutError(StoreError, TimeoutError):
    """A key (or counter value) that did not appear within the wait's budget."""


class FileStore:
    """set/get/wait/add on JSON files in ``root``; ``get`` never waits, ``wait`` polls until the key exists.

    Waits take a budget in network time (``timeout_ns``) or, by default, ``timeout_s`` seconds of wall time.
    Subclasses may raise their own error classes (``user_error``, ``timeout_error``)."""

    user_error: type[Exception] = StoreError
    timeout_error: type[Exception] = StoreTimeoutError

    def __init__(self, root: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 clock: Clock | None = None) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.user_error(f"store path {str(root)!r}: cannot create directory ({exc.strerror})") from None
        if not os.access(self.root, os.W_OK):
            raise self.user_error(f"store path {str(root)!r}: directory is not writable")
        self.timeout_s = timeout_s
        self.clock = clock or get_clock()

    def _path(self, key: str) -> Path:
        return self.root / f"{urllib.parse.quote(key, safe='')}.json"

    def set(self, key: str, value: Any) -> None:
        """Publish ``value`` (anything JSON can hold) under ``key`` atomically: readers see the old or the new."""
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        with os.fdopen(fd, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, self._path(key))

    def get(self, key: str) -> Any | None:
        """The value of ``key``, or None if nobody has set it yet (never waits)."""
        try:
            return json.loads(self._path(key).read_text())
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent)."""
        self._path(key).unlink(missing_ok=True)

    def wait(self, key: str, timeout_ns: float | None = None, *, poll_ns: int | None = None) -> Any:
        """The value of ``key`` once another end has set it; ``timeout_error`` when the budget is spent."""
        return self._poll(lambda: self.get(key), f"key {key!r}", timeout_ns, poll_ns)

    def add(self, key: str, delta: int) -> int:
        """Atomically add ``delta`` to the integer at ``key`` (0 if absent) and return the new value."""
        with open(self.root / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                value = int(self.get(key) or 0) + delta
                self.set(key, value)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return value

    def wait_value(self, key: str, at_least: int, timeout_ns: float | None = None) -> None:
        """Block until the integer at ``key`` reaches ``at_least`` (a counting barrier)."""
        def reached() -> bool | None:
            return True if int(self.get(key) or 0) >= at_least else None

        self._poll(reached, f"counter {key!r} to reach {at_least}", timeout_ns, None)

    def barrier(self, key: str, world_size: int, timeout_ns: float | None = None) -> None:
        """Every one of ``world_size`` callers returns only once all have arrived at ``key``."""
        self.add(key, 1)
        self.wait_value(key, world_size, timeout_ns)

    def _poll(self, probe: Any, what: str, timeout_ns: float | None, poll_ns: int | None) -> Any:
        """Call ``probe`` until it returns non-None; between calls sleep ``poll_ns`` (network time) or back off
        from 20 µs to 1 ms of wall time."""
        clock = self.clock
        budget_ns = clock.net_duration_ns(self.timeout_s * 1e9) if timeout_ns is None else timeout_ns
        end_ns = clock.now_ns() + budget_ns
        rounds = 0
        while True:
            value = probe()
            if value is not None:
                return value
            if clock.now_ns() >= end_ns:
                waited_s = clock.wall_duration_ns(budget_ns) / 1e9
                raise self.timeout_error(f"store {self.root}: timed out after {waited_s:g} s waiting for {what}")
            if poll_ns is not None:
                clock.sleep_ns(poll_ns)
            else:
                clock.sleep_ns(clock.net_duration_ns(min(1_000_000, 20_000 * (1 << min(6, rounds // 20)))))
                rounds += 1
