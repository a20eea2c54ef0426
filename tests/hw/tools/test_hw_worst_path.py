"""hw.tools.worst_path on a small mapped netlist: the deepest path cell by cell and the registers fed too deep."""

from __future__ import annotations

import pytest

from hw.tools.synth import logic_levels
from hw.tools.worst_path import deep_endpoints, worst_path

pytestmark = pytest.mark.unit


def _cell(kind: str, ins: dict[str, list[int]], outs: dict[str, list[int]]) -> dict:
    ports = {**dict.fromkeys(ins, "input"), **dict.fromkeys(outs, "output")}
    return {"type": kind, "port_directions": ports, "connections": {**ins, **outs}}


NETLIST = {"modules": {"top": {
    "cells": {
        "q": _cell("FDRE", {"D": [9], "C": [1]}, {"Q": [2]}),
        "a": _cell("LUT2", {"I0": [2], "I1": [2]}, {"O": [3]}),
        "b": _cell("LUT6", {"I0": [3]}, {"O": [5]}),
        "c": _cell("CARRY4", {"CI": [5]}, {"O": [9]}),
        "short": _cell("LUT1", {"I0": [2]}, {"O": [10]}),
        "r": _cell("FDRE", {"D": [10], "C": [1]}, {"Q": [11]}),
    },
    "netnames": {"count": {"bits": [2]}, "$abc$1": {"bits": [3]}, "sum": {"bits": [9]}, "flag": {"bits": [10]}},
}}}


def test_worst_path_walks_the_deepest_chain_with_the_depths_logic_levels_counts(capsys) -> None:
    path = worst_path(NETLIST, "top")
    assert [(cell, depth) for cell, _, depth, _ in path] == [("a", 1.0), ("b", 2.0), ("c", 2.5)]
    assert path[-1][3] == "sum[0]" and logic_levels(NETLIST, "top") == 3
    out = capsys.readouterr().out
    assert "path starts from: count[0]" in out and "path ends at: FDRE:count[0]" in out


def test_deep_endpoints_lists_only_registers_fed_deeper_than_the_bound() -> None:
    (found,) = deep_endpoints(NETLIST, "top", 2.0)
    assert found[0] == 2.5 and found[1] == "count[0]" and found[3] == ["LUT2:$abc$1[0]", "LUT6:?", "CARRY4:sum[0]"]
    assert len(deep_endpoints(NETLIST, "top", 1.0)) == 2
