"""Rendezvous key-value store in a shared directory (like torch's FileStore): atomic-rename writes, polled reads.

Hosts in network namespaces share the file system, so one directory bootstraps every rank of a job.  Keys map
to file names (percent-quoted); ``add`` is serialised with an fcntl lock so counters are exact.
"""

from __future__ import annotations

import fcntl
import os
import urllib.parse
from pathlib import Path

from sw.clock import Clock, get_clock

from .deadline import Backoff, Deadline
from .errors import CollectiveUserError


class FileStore:
    """set/get/add/wait on files in ``path``; ``get`` blocks until the key exists or ``timeout_s`` passes."""

    def __init__(self, path: str | os.PathLike[str], timeout_s: float = 60.0, clock: Clock | None = None) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CollectiveUserError(f"store path {str(path)!r}: cannot create directory ({exc.strerror})") from None
        if not os.access(self.path, os.W_OK):
            raise CollectiveUserError(f"store path {str(path)!r}: directory is not writable")
        self.timeout_s = timeout_s
        self.clock = clock or get_clock()

    def _file(self, key: str) -> Path:
        return self.path / urllib.parse.quote(key, safe="")

    def set(self, key: str, value: bytes) -> None:
        """Publish ``value`` under ``key`` atomically (readers see the old file, or the whole new one)."""
        final = self._file(key)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        tmp.write_bytes(value)
        os.replace(tmp, final)

    def try_get(self, key: str) -> bytes | None:
        """The value of ``key`` if some rank has set it, else None (never waits)."""
        try:
            return self._file(key).read_bytes()
        except FileNotFoundError:
            return None

    def get(self, key: str, timeout_s: float | None = None) -> bytes:
        """The value of ``key``, waiting for another rank to set it."""
        deadline = Deadline(self.timeout_s if timeout_s is None else timeout_s, self.clock)
        backoff = Backoff(self.clock, spins=0)
        while True:
            value = self.try_get(key)
            if value is not None:
                return value
            deadline.check(f"store key {key!r} in {self.path}")
            backoff.idle()

    def add(self, key: str, delta: int) -> int:
        """Atomically add ``delta`` to the integer at ``key`` (0 if absent) and return the new value."""
        with open(self.path / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                old = self.try_get(key)
                value = (int(old) if old else 0) + delta
                self.set(key, str(value).encode())
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return value

    def wait_value(self, key: str, at_least: int, timeout_s: float | None = None) -> None:
        """Block until the integer at ``key`` reaches ``at_least`` (a counting barrier)."""
        deadline = Deadline(self.timeout_s if timeout_s is None else timeout_s, self.clock)
        backoff = Backoff(self.clock, spins=0)
        while True:
            raw = self.try_get(key)
            if raw is not None and int(raw) >= at_least:
                return
            deadline.check(f"store counter {key!r} to reach {at_least} (now {int(raw) if raw else 0})")
            backoff.idle()

    def barrier(self, key: str, world_size: int, timeout_s: float | None = None) -> None:
        """Every one of ``world_size`` callers returns only once all have arrived at ``key``."""
        self.add(key, 1)
        self.wait_value(key, world_size, timeout_s)
