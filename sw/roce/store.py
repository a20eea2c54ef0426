"""Rendezvous store for connection set-up: hosts in network namespaces share the file system, so a directory
of small JSON files is enough (like torch's FileStore).  Writes are atomic (write a temporary file, rename).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from sw.clock import Clock, get_clock

_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class StoreError(RuntimeError):
    """A key that never appeared in time, or a bad key name."""

    is_user_error = True


class FileStore:
    """Key -> JSON value in directory ``root``; ``wait`` polls until keys exist (control path only)."""

    def __init__(self, root: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.clock = clock or get_clock()

    def _path(self, key: str) -> Path:
        if not _KEY_RE.match(key):
            raise StoreError(f"store key {key!r}: use letters, digits, '_', '-' and '.' only")
        return self.root / f"{key}.json"

    def set(self, key: str, value: Any) -> None:
        """Publish ``value`` (anything JSON can hold) under ``key``, atomically."""
        path = self._path(key)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        with os.fdopen(fd, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, path)

    def get(self, key: str) -> Any | None:
        """The value of ``key``, or None if nobody has set it yet (never waits)."""
        try:
            return json.loads(self._path(key).read_text())
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent)."""
        self._path(key).unlink(missing_ok=True)

    def wait(self, key: str, timeout_ns: int, *, poll_ns: int = 2_000_000) -> Any:
        """The value of ``key`` once it exists; StoreError after ``timeout_ns`` of network time."""
        end_ns = self.clock.now_ns() + timeout_ns
        while True:
            value = self.get(key)
            if value is not None:
                return value
            if self.clock.now_ns() >= end_ns:
                raise StoreError(
                    f"store {self.root}: key {key!r} did not appear within {timeout_ns / 1e9:g} s"
                )
            self.clock.sleep_ns(poll_ns)
