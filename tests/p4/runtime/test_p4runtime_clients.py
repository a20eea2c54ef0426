"""Real P4Runtime clients from PyPI drive the switch: p4runtime-shell and finsy, each in its own venv (their
protobuf pins clash with ours: < 3.21 and 6), set the pipeline from ``p4 check --p4runtime-files`` + the source,
insert LPM entries (p4runtime-shell also a default action), read them back and get a duplicate's per-update
error; the control socket then shows the same entries."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from p4.switch.control import ControlClient

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
CLIENTS = Path(__file__).with_name("clients")
BASIC_P4 = REPO / "p4" / "programs" / "basic.p4"
DUPLICATE = "table MyIngress.ipv4_lpm: the entry exists (handle {})"


@pytest.fixture
def switch(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """basic.p4 on a switch with P4Runtime on a Unix socket: (grpc address, control socket, P4Info file)."""
    info = tmp_path / "basic.p4info.txtpb"
    subprocess.run([sys.executable, "-m", "sw.cli", "p4", "check", str(BASIC_P4), "--p4runtime-files", str(info)],
                   check=True, capture_output=True, cwd=REPO)
    ctl, grpc_addr = str(tmp_path / "ctl.sock"), f"unix:{tmp_path}/p4rt.sock"
    proc = subprocess.Popen([sys.executable, "-m", "p4.switch", str(BASIC_P4), "--ctl", ctl, "--grpc-port",
                             grpc_addr, "--log-file", str(tmp_path / "switch.log")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline().strip() == "ready", proc.stderr.read()
        yield grpc_addr, ctl, info
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0


def run_session(venv: str, script: str, grpc_addr: str, info: Path, cwd: Path) -> dict:
    """Run a client session script with that client's venv, isolated (``-I``: no $PYTHONPATH, which CI points
    at the checkout, and not from the repo root: our p4/ would shadow the PyPI p4runtime package's ``p4``); its
    last stdout line is JSON."""
    python = REPO / venv / "bin" / "python"
    assert python.exists(), f"{python} missing: run scripts/bootstrap.sh (it installs the P4Runtime clients)"
    run = subprocess.run([str(python), "-I", str(CLIENTS / script), grpc_addr, str(info), str(BASIC_P4)],
                         capture_output=True, text=True, timeout=120, cwd=cwd)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def dump(ctl: str) -> str:
    with ControlClient(ctl) as client:
        return client.run("table_dump MyIngress.ipv4_lpm")


def test_p4runtime_shell_programs_the_switch(switch, tmp_path: Path) -> None:
    grpc_addr, ctl, info = switch
    seen = run_session(".venv-p4rt-clients", "p4runtime_shell_session.py", grpc_addr, info, tmp_path)
    assert seen["read"] == ["0a000202/32->02", "0a000300/24->03"]      # dst/prefix -> port, as it reads them
    assert seen["duplicate"] == [[0, 6, DUPLICATE.format(1)]]            # index 0, ALREADY_EXISTS
    text = dump(ctl)
    assert "0a000202/32" in text and "0a000300/24" in text
    assert "Action entry: MyIngress.ipv4_forward - 20000000004, 4" in text     # the default it modified


def test_finsy_programs_the_switch(switch, tmp_path: Path) -> None:
    grpc_addr, ctl, info = switch
    seen = run_session(".venv-p4rt-finsy", "finsy_session.py", grpc_addr, info, tmp_path)
    assert seen["read"] == ["0xa000202->2", "0xa000300/24->3"]       # finsy writes a /32 as the bare value
    assert seen["duplicate"] == [[0, "ALREADY_EXISTS", DUPLICATE.format(0)]]
    text = dump(ctl)
    assert "0a000202/32" in text and "0a000300/24" in text and "MyIngress.ipv4_forward - 20000000003, 3" in text
