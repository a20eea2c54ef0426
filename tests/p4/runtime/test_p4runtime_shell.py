"""p4runtime-shell (PyPI ``p4runtime-shell``, in its own venv: it pins protobuf < 3.21) drives the switch over
P4Runtime: pipeline from ``p4 check --p4runtime-files`` + the source, LPM inserts, a default action, read-back,
and its P4RuntimeWriteException for a duplicate; the control socket then shows the same entries."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

import pytest

from p4.switch.control import ControlClient

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
CLIENT_PY = REPO / ".venv-p4rt-clients" / "bin" / "python"
SESSION = Path(__file__).with_name("clients") / "p4runtime_shell_session.py"
BASIC_P4 = REPO / "p4" / "programs" / "basic.p4"
READ_BACK = ["0a000202/32->02", "0a000300/24->03"]   # dst/prefix -> port, as p4runtime-shell reads them


def test_p4runtime_shell_programs_the_switch(tmp_path: Path) -> None:
    assert CLIENT_PY.exists(), f"{CLIENT_PY} missing: run scripts/bootstrap.sh (it installs p4runtime-shell there)"
    info = tmp_path / "basic.p4info.txtpb"
    subprocess.run([sys.executable, "-m", "sw.cli", "p4", "check", str(BASIC_P4), "--p4runtime-files", str(info)],
                   check=True, capture_output=True, cwd=REPO)
    ctl, grpc_addr = str(tmp_path / "ctl.sock"), f"unix:{tmp_path}/p4rt.sock"
    switch = subprocess.Popen([sys.executable, "-m", "p4.switch", str(BASIC_P4), "--ctl", ctl, "--grpc-port",
                               grpc_addr, "--log-file", str(tmp_path / "switch.log")], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([switch.stdout], [], [], 60)
        assert ready and switch.stdout.readline().strip() == "ready", switch.stderr.read()
        run = subprocess.run([str(CLIENT_PY), str(SESSION), grpc_addr, str(info), str(BASIC_P4)],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        seen = json.loads(run.stdout.strip().splitlines()[-1])
        assert seen["read"] == READ_BACK, seen
        assert seen["duplicate"] == [[0, 6, "table MyIngress.ipv4_lpm: the entry exists (handle 1)"]]   # ALREADY_EXISTS
        with ControlClient(ctl) as client:
            dump = client.run("table_dump MyIngress.ipv4_lpm")
        assert "0a000202/32" in dump and "0a000300/24" in dump
        assert "Action entry: MyIngress.ipv4_forward - 20000000004, 4" in dump      # the default it modified
    finally:
        switch.terminate()
        assert switch.wait(timeout=20) == 0
