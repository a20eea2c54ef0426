"""sw.roce.wire.pattern: the RTL NIC's payload pattern as documented (byte i of PSN p of QP q)."""

from __future__ import annotations

import pytest

from sw.roce.wire.pattern import pattern_payload


def test_bytes_follow_the_formula() -> None:
    for qp, psn, n in ((0, 0, 300), (3, (1 << 24) - 2, 9), (0x1FF, 0x123456, 70)):
        assert pattern_payload(qp, psn, n) == bytes(((psn + i) % 256) ^ (qp % 256) for i in range(n))


def test_bad_arguments_are_rejected() -> None:
    for args in ((0, 1 << 24, 4), (-1, 0, 4), (0, 0, -1)):
        with pytest.raises(ValueError, match="pattern_payload"):
            pattern_payload(*args)
