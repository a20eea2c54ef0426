"""Every bad flag value of fabric / run / bench / roce perf / cc is one error line naming the flag, exit 2, before
anything is built: no fabric, namespace, forked rank, state directory or temporary directory (issue 24)."""

from __future__ import annotations

import os
import tempfile

import pytest

from sw.cli import main

pytestmark = pytest.mark.unit

FAB = ["fabric", "up", "--name", "flagtest"]
RUN = ["run", "--name", "flagtest"]
BENCH = ["bench", "allreduce", "-b", "8K", "-e", "8K", "--name", "flagtest"]
LOCAL = [*BENCH, "--local"]
PERF = ["roce", "perf", "--selftest"]
CC = ["cc", "sim", "--cc", "none", "--duration", "1ms"]
HIL = ["hil", "bench", "--json"]
HIL_RUN = ["hil", "run", "--json"]

# (argv, the text the one error line must contain: the flag or the value at fault)
CASES: list[tuple[list[str], str]] = [
    # hil bench: frames, dilation; an unknown hil subcommand
    ([*HIL, "--frames", "0"], "--frames"),
    ([*HIL, "--frames", "many"], "--frames"),
    ([*HIL, "--time-dilation", "0.5"], "--time-dilation"),
    ([*HIL, "--time-dilation", "nan"], "--time-dilation"),
    (["hil", "runn"], "runn"),
    # hil run: host, duration, cc, topology, plot
    ([*HIL_RUN, "--hil-host", "s9"], "--hil-host s9"),
    ([*HIL_RUN, "--duration", "0"], "--duration"),
    ([*HIL_RUN, "--duration=-1ms"], "--duration"),
    ([*HIL_RUN, "--duration", "2s"], "--duration"),
    ([*HIL_RUN, "--cc", "cubic"], "--cc"),
    ([*HIL_RUN, "--cc", "hpcc", "--hil-host", "s9"], "--hil-host s9"),   # hpcc runs: the next flag is checked
    ([*HIL_RUN, "--servers", "1", "--pods", "1"], "--servers 1"),
    ([*HIL_RUN, "--time-dilation", "0"], "--time-dilation"),
    ([*HIL_RUN, "--plot", "/nonexistent/x.png"], "--plot"),
    # fabric up / test: topology, PFC, names, paths
    ([*FAB, "--log-level", "bogus"], "--log-level"),
    ([*FAB[:2], "--name", "a" * 300], "--name"),
    ([*FAB[:2], "--name", "no/slash"], "--name"),
    ([*FAB, "--pfc", "maybe"], "--pfc"),
    ([*FAB, "--pfc", "on", "--pfc-watchdog", "nan"], "--pfc-watchdog"),
    ([*FAB, "--pfc", "on", "--pfc-watchdog", "inf"], "--pfc-watchdog"),
    ([*FAB, "--pfc", "on", "--pfc-watchdog", "-1"], "--pfc-watchdog"),
    ([*FAB, "--pfc-watchdog", "5"], "--pfc-watchdog"),
    ([*FAB, "--pfc-xoff", "60000"], "--pfc-xoff"),
    ([*FAB, "--pfc-xon", "1000"], "--pfc-xon"),
    ([*FAB, "--pfc-headroom", "1000"], "--pfc-headroom"),
    ([*FAB, "--pfc", "on", "--pfc-xoff", "0"], "--pfc-xoff"),
    ([*FAB, "--pfc", "on", "--pfc-xoff", "99999999999"], "--pfc-xoff"),
    ([*FAB, "--pfc", "on", "--pfc-xon", "-5"], "--pfc-xon"),
    ([*FAB, "--pfc", "on", "--pfc-xon", "50000", "--pfc-xoff", "40000"], "--pfc-xon"),
    ([*FAB, "--pfc", "on", "--pfc-headroom", "-1"], "--pfc-headroom"),
    ([*FAB, "--pfc", "on", "--pfc-priority", "9"], "--pfc-priority"),
    ([*FAB, "--pfc", "on", "--backend", "bmv2"], "--backend"),
    ([*FAB, "--servers", "0"], "--servers"),
    ([*FAB, "--servers", "-3"], "--servers"),
    ([*FAB, "--servers", "100000"], "--servers"),
    ([*FAB, "--servers", "nan"], "--servers"),
    ([*FAB, "--gpus-per-server", "0"], "--gpus-per-server"),
    ([*FAB, "--gpus-per-server", "999"], "--gpus-per-server"),
    ([*FAB, "--pods", "0"], "--pods"),
    ([*FAB, "--spines", "-1"], "--spines"),
    ([*FAB, "--mtu", "0"], "--mtu"),
    ([*FAB, "--mtu", "20"], "--mtu"),
    ([*FAB, "--mtu", "100000"], "--mtu"),
    ([*FAB, "--oversubscription", "nan"], "--oversubscription"),
    ([*FAB, "--oversubscription", "inf"], "--oversubscription"),
    ([*FAB, "--oversubscription", "0"], "--oversubscription"),
    ([*FAB, "--link-rate", "nan"], "--link-rate"),
    ([*FAB, "--link-rate", "0"], "--link-rate"),
    ([*FAB, "--link-rate", "-1G"], "--link-rate"),
    ([*FAB, "--delay", "nan"], "--delay"),
    ([*FAB, "--delay", "-1us"], "--delay"),
    ([*FAB, "--delay", "100000s"], "--delay"),
    ([*FAB, "--link-rate", "1000000T"], "--link-rate"),
    ([*FAB, "--seed", "-1"], "--seed"),
    ([*FAB, "--backend", "tofino"], "--backend"),
    ([*FAB, "--impairable", "x:y"], "--impairable"),
    ([*FAB, "--pcap", "/nonexistent/pcaps"], "--pcap"),
    (["fabric", "test", "--oversubscription", "nan"], "--oversubscription"),
    (["fabric", "test", "--pfc", "on", "--pfc-watchdog", "nan"], "--pfc-watchdog"),
    (["fabric", "test", "--mtu", "20"], "--mtu"),
    # run
    ([*RUN, "--timeout", "nan", "--", "true"], "--timeout"),
    ([*RUN, "--timeout", "inf", "--", "true"], "--timeout"),
    ([*RUN, "--timeout", "0", "--", "true"], "--timeout"),
    ([*RUN, "--timeout", "-1", "--", "true"], "--timeout"),
    ([*RUN, "--gpus", "0", "--", "true"], "--gpus"),
    ([*RUN, "--servers", "100000", "--", "true"], "--servers"),
    ([*RUN, "--mtu", "20", "--", "true"], "--mtu"),
    ([*RUN, "--pfc-watchdog", "nan", "--", "true"], "--pfc-watchdog"),
    ([*RUN, "--intra-rate", "fast", "--", "true"], "--intra-rate"),
    ([*RUN, "--roce-cc", "timely", "--", "true"], "--roce-cc"),
    ([*RUN, "--", "/no/such/cmd"], "/no/such/cmd"),
    ([*RUN, "--logdir", "/nonexistent/logs", "--", "true"], "--logdir"),
    ([*RUN, "--local", "--servers", "250", "--gpus", "16", "--", "true"], "local ranks: at most"),
    ([*RUN, "--local", "--mtu", "20", "--", "true"], "--mtu"),
    # bench --local and on a fabric
    ([*LOCAL, "-A", "foo"], "-A"),
    ([*BENCH, "-A", "foo"], "-A"),
    ([*BENCH, "--roce-cc", "swift"], "--roce-cc"),
    (["train", "--name", "flagtest", "--roce-cc", "cubic"], "--roce-cc"),
    ([*LOCAL, "--timeout", "0"], "--timeout"),
    ([*LOCAL, "--timeout", "-1"], "--timeout"),
    ([*LOCAL, "--timeout", "nan"], "--timeout"),
    ([*LOCAL, "--timeout", "inf"], "--timeout"),
    ([*BENCH, "--timeout", "nan"], "--timeout"),
    ([*LOCAL, "--servers", "100000"], "--servers"),
    ([*LOCAL, "--servers", "0"], "--servers"),
    ([*LOCAL, "--gpus", "0"], "--gpus"),
    ([*LOCAL, "--gpus", "100000"], "--gpus"),
    ([*LOCAL, "--mtu", "20"], "--mtu"),
    ([*LOCAL, "--mtu", "0"], "--mtu"),
    ([*LOCAL, "--mtu", "100000"], "--mtu"),
    ([*LOCAL, "--oversubscription", "nan"], "--oversubscription"),
    ([*LOCAL, "--pods", "0"], "--pods"),
    ([*LOCAL, "--spines", "-1"], "--spines"),
    ([*LOCAL, "-f", "0"], "-f"),
    ([*LOCAL, "-n", "0"], "-n"),
    ([*LOCAL, "-w", "-1"], "-w"),
    ([*LOCAL, "-c", "2"], "-c"),
    ([*LOCAL, "-r", "-1"], "-r"),
    ([*LOCAL, "-d", "float128"], "float128"),
    ([*LOCAL, "-b", "nan"], "-b"),
    ([*LOCAL, "--line-rate", "nan"], "--line-rate"),
    ([*LOCAL, "--link-rate", "0"], "--link-rate"),
    ([*LOCAL, "--intra-rate", "-3x"], "--intra-rate"),
    ([*BENCH, "--servers", "100000"], "--servers"),
    ([*BENCH, "--mtu", "20"], "--mtu"),
    # roce perf --selftest
    ([*PERF, "--timeout", "nan"], "--timeout"),
    ([*PERF, "--timeout", "inf"], "--timeout"),
    ([*PERF, "--timeout", "0"], "--timeout"),
    ([*PERF, "--timeout", "-1"], "--timeout"),
    ([*PERF, "--mtu", "0"], "--mtu"),
    ([*PERF, "--mtu", "20"], "--mtu"),
    ([*PERF, "--mtu", "1500"], "--mtu"),
    ([*PERF, "--iters", "0"], "--iters"),
    ([*PERF, "--tx-depth", "0"], "--tx-depth"),
    ([*PERF, "--lat-iters", "-1"], "--lat-iters"),
    ([*PERF, "--rd-atomic", "0"], "--rd-atomic"),
    ([*PERF, "--rd-atomic", "17"], "--rd-atomic"),
    ([*PERF, "--loss", "nan"], "--loss"),
    ([*PERF, "--dup", "-1"], "--dup"),
    ([*PERF, "--reorder", "101"], "--reorder"),
    ([*PERF, "--qp-timeout", "0"], "--qp-timeout"),
    ([*PERF, "--qp-timeout", "32"], "--qp-timeout"),
    ([*PERF, "--size", "0"], "--size"),
    ([*PERF, "--size", "nan"], "--size"),
    ([*PERF, "--link-rate", "0"], "--link-rate"),
    ([*PERF, "--link-rate", "1000000T"], "--link-rate"),
    ([*PERF, "--iters", "99999999999"], "--iters"),
    ([*PERF, "--tx-depth", "999999999"], "--tx-depth"),
    ([*PERF, "--base-rtt", "nan"], "--base-rtt"),
    ([*PERF, "--base-rtt", "1ns"], "--base-rtt"),
    # cc sim
    ([*CC, "--flows", "0"], "--flows"),
    ([*CC, "--flows", "-1"], "--flows"),
    ([*CC, "--flows", "100000000"], "--flows"),
    ([*CC, "--mtu", "0"], "--mtu"),
    ([*CC, "--mtu", "nan"], "--mtu"),
    ([*CC, "--link-rate", "nan"], "--link-rate"),
    ([*CC, "--link-rate", "1000000T"], "--link-rate"),
    ([*CC, "--duration", "nan"], "--duration"),
    ([*CC[:-1], "0"], "--duration"),
    ([*CC, "--prop-delay", "-1us"], "--prop-delay"),
    ([*CC, "--seed", "-1"], "--seed"),
]


@pytest.fixture
def nothing_built(tmp_path, monkeypatch):
    """Every builder raises (and records) if reached; state and temp directories point into ``tmp_path``."""
    import emu.fabric
    import emu.launch
    import emu.netns
    import emu.run_cli
    import sw.collectives.local

    built: list[str] = []

    def refuse(what: str):
        def _refuse(*_a, **_k):
            built.append(what)
            raise AssertionError(f"{what} reached before the flags were validated")
        return _refuse

    monkeypatch.setattr(emu.fabric.Fabric, "up", refuse("Fabric.up"))
    monkeypatch.setattr(emu.netns.NetnsLab, "__enter__", refuse("NetnsLab"))
    monkeypatch.setattr(emu.launch, "launch", refuse("launch"))
    monkeypatch.setattr(emu.run_cli, "launch", refuse("launch"))
    monkeypatch.setattr(sw.collectives.local, "run_local", refuse("run_local"))
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return built


@pytest.mark.parametrize("argv,names", CASES, ids=[" ".join(a)[-60:] for a, _ in CASES])
def test_bad_flag_is_one_line_exit_2_before_anything_is_built(argv, names, nothing_built, tmp_path, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:   # argparse's own error (a type= function rejected the value)
        code = exc.code
    err = capsys.readouterr().err
    assert not nothing_built, err
    assert code == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert len(err.strip().splitlines()) == 1 and "error" in last and names in last, err
    state = tmp_path / "state"
    assert not state.exists() or not any(state.iterdir()), "a rejected command left a state directory"
    left = [p.name for p in (tmp_path / "tmp").iterdir() if p.is_dir()]   # (files: e.g. the P4 parser's cache)
    assert not left, f"a rejected command left temporary directories {left}"
    assert not any(os.path.exists(p) for p in ("/nonexistent/pcaps", "/nonexistent/logs"))


@pytest.mark.parametrize("argv", [[*RUN, "--", "true"], BENCH, ["train", "--name", "flagtest"]],
                         ids=["run", "bench", "train"])
def test_bad_roce_cc_in_the_environment_is_one_line_before_a_fabric(argv, nothing_built, capsys, monkeypatch):
    monkeypatch.setenv("STARPULSE_ROCE_CC", "timely")
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert not nothing_built and code == 2 and len(err) == 1, err
    assert "$STARPULSE_ROCE_CC='timely': expected one of dcqcn, hpcc, none" in err[0]
