"""Helpers for the P4 target tests: compile P4 text or a shipped program into a ready pipeline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from p4.compat_bmv2 import Bmv2Compat
from p4.compiler import compile_file, compile_source
from p4.pipeline import Pipeline
from p4.program import Program
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock

PROGRAMS = Path(__file__).resolve().parents[3] / "p4" / "programs"

V1_PRELUDE = "#include <core.p4>\n#include <v1model.p4>\n"


class Switch:
    """A compiled program + pipeline + CLI on a manual clock: what most tests need."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.clock = ManualClock()
        self.pipe = Pipeline(prog, clock=self.clock)
        self.cli = RuntimeCLI(self.pipe)

    def cmd(self, *lines: str) -> list[str]:
        return [self.cli.execute(line) for line in lines]

    def send(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        out, self.last = self.pipe.process(port, bytes(frame))
        return out


ProgramSwitch = Callable[[str | Path], Switch]     # the program_switch fixture
SourceSwitch = Callable[..., Switch]               # the source_switch fixture


@pytest.fixture(scope="session")
def program_switch() -> ProgramSwitch:
    """Factory: a fresh Switch for one of the shipped programs (by file name, or any path); a shipped program must
    also be one p4c's BMv2 back end accepts (``--target-compat bmv2`` is on for them)."""
    def make(name: str | Path) -> Switch:
        path = PROGRAMS / name
        shipped = path.resolve().parent == PROGRAMS.resolve()
        return Switch(compile_file(path, checks=(Bmv2Compat(),) if shipped else ()))
    return make


@pytest.fixture(scope="session")
def source_switch() -> SourceSwitch:
    """Factory: a fresh Switch for P4 text (the v1model includes are prepended unless prelude=False)."""
    def make(text: str, prelude: bool = True, name: str = "test.p4") -> Switch:
        return Switch(compile_source((V1_PRELUDE if prelude else "") + text, name))
    return make
