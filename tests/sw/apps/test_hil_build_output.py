"""A model build's tool output goes to stderr: ``hil run --json`` keeps stdout to its one JSON object even when the
run has to build the Verilator model first."""

from __future__ import annotations

import subprocess
import sys

from sw.apps.hil.model import stdout_on_stderr


def test_a_child_process_writing_to_stdout_lands_on_stderr_inside_the_block(capfd) -> None:
    print("before", flush=True)
    with stdout_on_stderr():
        subprocess.run([sys.executable, "-c", "print('built')"], check=True)
        print("mine", flush=True)
    print("after", flush=True)
    out, err = capfd.readouterr()
    assert out.split() == ["before", "after"]
    assert err.split() == ["built", "mine"]
