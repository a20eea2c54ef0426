"""The one rendezvous store (``sw.units.file_store``): JSON values written atomically, counters exact, waits
bounded, a bad directory one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from sw.clock import Clock
from sw.units.file_store import FileStore, StoreError, StoreTimeoutError

pytestmark = pytest.mark.unit


def test_set_get_wait_add_and_timeout(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", timeout_s=0.2, clock=Clock())
    assert store.get("k") is None
    store.set("k", {"qp_num": 17, "mac": "02:00:00:00:00:01"})
    store.set("a/b c", "xyz")                                    # any key: percent-quoted into a file name
    assert store.get("k") == {"qp_num": 17, "mac": "02:00:00:00:00:01"} and store.wait("a/b c") == "xyz"
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.startswith(".tmp-")], "temporaries renamed away"
    assert [store.add("n", 2), store.add("n", 3)] == [2, 5]
    store.wait_value("n", 5)
    store.barrier("b", 1)
    with pytest.raises(StoreTimeoutError, match="waiting for key 'missing'"):
        store.wait("missing", 5_000_000, poll_ns=1_000_000)
    with pytest.raises(StoreTimeoutError, match="timed out after 0.2 s waiting for counter 'n' to reach 6"):
        store.wait_value("n", 6)
    store.delete("k")
    assert store.get("k") is None


def test_an_unusable_directory_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="store path .*cannot create directory") as info:
        FileStore(tmp_path / "file" / "sub")
    assert info.value.is_user_error
