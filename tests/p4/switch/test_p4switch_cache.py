"""Compiled programs are cached by content hash: the second load reuses the parse tree, edits invalidate it."""

from __future__ import annotations

import pickle

import pytest
from switchlab import FEATURES_P4

from p4.errors import CompileError
from p4.switch.pipeline_adapter import cache_dir, compile_cached

pytestmark = pytest.mark.unit


def test_cache_reuses_and_invalidates_by_content(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STARPULSE_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "prog.p4"
    src.write_text(FEATURES_P4.read_text())
    first = compile_cached(src)
    entries = sorted(cache_dir().glob("*.tree.pickle"))
    assert len(entries) == 1
    second = compile_cached(src)
    assert sorted(cache_dir().glob("*.tree.pickle")) == entries
    assert list(second.tables) == list(first.tables) and second.source == first.source
    src.write_text(src.read_text().replace("ECN_THRESHOLD_PKTS = 10", "ECN_THRESHOLD_PKTS = 12"))
    third = compile_cached(src)
    assert len(list(cache_dir().glob("*.tree.pickle"))) == 2
    assert third.source != first.source


def test_corrupt_cache_entry_is_ignored_and_errors_keep_positions(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STARPULSE_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "prog.p4"
    src.write_text(FEATURES_P4.read_text())
    compile_cached(src)
    (entry,) = cache_dir().glob("*.tree.pickle")
    entry.write_bytes(b"not a pickle")
    assert "MyIngress.ipv4_lpm" in compile_cached(src).tables
    entry.write_bytes(pickle.dumps(42))                 # a valid pickle of the wrong thing
    assert "MyIngress.ipv4_lpm" in compile_cached(src).tables
    src.write_text(src.read_text().replace("ttl - 1;", "ttl - ;"))
    with pytest.raises(CompileError, match=r"prog\.p4:\d+:\d+"):
        compile_cached(src)


def test_defines_are_part_of_the_cache_key(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STARPULSE_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "prog.p4"
    src.write_text(FEATURES_P4.read_text().replace("ECN_THRESHOLD_PKTS = 10;", "ECN_THRESHOLD_PKTS = THRESH;"))
    with pytest.raises(CompileError):
        compile_cached(src)                                   # THRESH undefined
    before = len(list(cache_dir().glob("*.tree.pickle")))
    a = compile_cached(src, defines={"THRESH": "12"})
    b = compile_cached(src, defines={"THRESH": "20"})
    assert a.source != b.source
    assert len(list(cache_dir().glob("*.tree.pickle"))) == before + 2   # one entry per distinct source
