"""The launcher's pure parts: rank placement on NICs, the environment contract, exit-code rules and the
one-line errors of ``starpulse run`` (no namespaces needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from emu import run_cli
from emu.launch import (
    EXIT_TIMEOUT,
    JobResult,
    LaunchError,
    RankResult,
    fabric_env,
    rank_env,
    rank_plan,
    resolve_command,
    roce_cc_of,
)
from sw.collectives.errors import CollectiveUserError
from sw.collectives.fabric_topology import Topology, TopologySpec

pytestmark = pytest.mark.unit


def test_ranks_are_server_major_on_their_rail_nic() -> None:
    plans = rank_plan(Topology(TopologySpec(servers=3, gpus_per_server=2, spines=1)))
    assert [(p.rank, p.server, p.local_rank, p.nic_ifname, p.nic_addr) for p in plans] == [
        (0, "s0", 0, "s0-eth0", "10.0.0.1"), (1, "s0", 1, "s0-eth1", "10.0.1.1"),
        (2, "s1", 0, "s1-eth0", "10.0.0.2"), (3, "s1", 1, "s1-eth1", "10.0.1.2"),
        (4, "s2", 0, "s2-eth0", "10.0.0.3"), (5, "s2", 1, "s2-eth1", "10.0.1.3")]
    assert {p.world_size for p in plans} == {6} and {p.local_world_size for p in plans} == {2}


def test_rank_env_carries_the_contract() -> None:
    plan = rank_plan(Topology(TopologySpec(servers=2, gpus_per_server=2, spines=1)))[3]
    env = rank_env(plan, "/tmp/store-x", {"PATH": "/bin", "STARPULSE_TIME_DILATION": "10"})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "STARPULSE_STORE",
                                "STARPULSE_NIC_ADDR", "STARPULSE_SERVER")} == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "STARPULSE_STORE": "/tmp/store-x",
        "STARPULSE_NIC_ADDR": "10.0.1.2", "STARPULSE_SERVER": "1"}
    assert env["STARPULSE_TIME_DILATION"] == "10"            # passed through to the ranks
    assert str(Path(run_cli.__file__).resolve().parents[1]) in env["PYTHONPATH"].split(":")


def test_ranks_get_the_fabric_link_rate_dilation_and_roce() -> None:
    spec = TopologySpec(servers=2, gpus_per_server=2, spines=1, link_rate_bps=400_000_000)
    shared = fabric_env(spec, 50.0, base={"PATH": "/bin", "STARPULSE_TIME_DILATION": "3"})
    assert shared == {"STARPULSE_INTER_RATE": "400000000", "STARPULSE_INTRA_RATE": "3600000000",
                      "STARPULSE_TIME_DILATION": "50.0", "STARPULSE_NET": "roce",
                      "STARPULSE_ROCE_BASE_RTT": str(spec.base_rtt_ns()), "STARPULSE_LINK_MTU": "1500"}
    env = rank_env(rank_plan(Topology(spec))[0], "/tmp/s", {"PATH": "/bin", "STARPULSE_TIME_DILATION": "3"}, shared)
    assert (env["STARPULSE_INTER_RATE"], env["STARPULSE_TIME_DILATION"], env["STARPULSE_NET"]) == (
        "400000000", "50.0", "roce")                        # the fabric's dilation wins over a stale one


def test_the_user_may_choose_tcp_or_pace_below_line_rate() -> None:
    spec = TopologySpec(servers=2, gpus_per_server=1, spines=1)
    assert fabric_env(spec, 1.0, "tcp", base={})["STARPULSE_NET"] == "tcp"
    user = fabric_env(spec, 1.0, base={"STARPULSE_NET": "TCP", "STARPULSE_INTER_RATE": "50M"})
    assert (user["STARPULSE_NET"], user["STARPULSE_INTER_RATE"]) == ("tcp", "50M")
    with pytest.raises(LaunchError, match=r"\$STARPULSE_NET='ib': expected one of roce, tcp"):
        fabric_env(spec, 1.0, base={"STARPULSE_NET": "ib"})


def test_the_roce_cc_comes_from_the_flag_else_the_environment_and_bad_ones_are_named() -> None:
    spec = TopologySpec(servers=2, gpus_per_server=1, spines=1)
    assert "STARPULSE_ROCE_CC" not in fabric_env(spec, 1.0, base={})         # the communicator's default (dcqcn)
    assert roce_cc_of(fabric_env(spec, 1.0, base={})) == "dcqcn"
    assert fabric_env(spec, 1.0, base={"STARPULSE_ROCE_CC": "HPCC"})["STARPULSE_ROCE_CC"] == "hpcc"
    shared = fabric_env(spec, 1.0, base={"STARPULSE_ROCE_CC": "none"}, roce_cc="hpcc")
    assert shared["STARPULSE_ROCE_CC"] == "hpcc" and roce_cc_of(shared) == "hpcc"        # the flag wins
    assert roce_cc_of(fabric_env(spec, 1.0, "tcp", base={}, roce_cc="hpcc")) is None    # no QPs over TCP
    with pytest.raises(LaunchError, match=r"\$STARPULSE_ROCE_CC='timely': expected one of dcqcn, hpcc, none"):
        fabric_env(spec, 1.0, base={"STARPULSE_ROCE_CC": "timely"})
    with pytest.raises(LaunchError, match=r"--roce-cc 'swift': expected one of dcqcn, hpcc, none"):
        fabric_env(spec, 1.0, base={}, roce_cc="swift")


def test_run_roce_cc_flag_takes_the_three_and_rejects_others(capsys) -> None:
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    assert parser.parse_args(["--roce-cc", "hpcc", "--", "true"]).roce_cc == "hpcc"
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--roce-cc", "timely", "--", "true"])
    assert info.value.code == 2 and "--roce-cc" in capsys.readouterr().err


def test_nvlink_stand_in_scales_with_the_link_rate_unless_given() -> None:
    spec = TopologySpec(servers=2, gpus_per_server=2, spines=1, link_rate_bps=100_000_000)
    assert fabric_env(spec, 1.0, base={})["STARPULSE_INTRA_RATE"] == "900000000"          # 9 x the rail rate
    assert fabric_env(spec, 1.0, base={"STARPULSE_INTRA_RATE": "2G"})["STARPULSE_INTRA_RATE"] == "2000000000"
    assert fabric_env(spec, 1.0, base={"STARPULSE_INTRA_RATE": "2G"}, intra_rate="18x")["STARPULSE_INTRA_RATE"] \
        == "1800000000"                                                                   # the flag wins
    assert fabric_env(spec, 1.0, base={}, intra_rate="off")["STARPULSE_INTRA_RATE"] == "off"
    with pytest.raises(CollectiveUserError, match=r"--intra-rate 'fastx': expected a rate like 900M, a multiple"):
        fabric_env(spec, 1.0, base={}, intra_rate="fastx")
    with pytest.raises(CollectiveUserError, match=r"\$STARPULSE_INTRA_RATE 'quick': expected a rate"):
        fabric_env(spec, 1.0, base={"STARPULSE_INTRA_RATE": "quick"})


def _r(rank: int, code: int, stopped: bool = False) -> RankResult:
    return RankResult(rank, "s0", code, stopped, Path(f"rank{rank}.log"))


def test_exit_code_is_the_worst_own_failure() -> None:
    assert JobResult([_r(0, 0), _r(1, 0)]).exit_code == 0
    assert JobResult([_r(0, 143, True), _r(1, 3), _r(2, 7)]).exit_code == 7    # ranks we stopped do not count
    assert JobResult([_r(0, 143, True)], timed_out=True).exit_code == EXIT_TIMEOUT
    assert JobResult([_r(0, 0), _r(1, 3), _r(2, 143, True)]).failed_ranks == [1]


def test_python_means_this_interpreter_and_missing_programs_are_named() -> None:
    assert resolve_command(["python", "-m", "x"]) == [sys.executable, "-m", "x"]
    with pytest.raises(LaunchError, match="'no-such-prog-q'"):
        resolve_command(["no-such-prog-q"])
    with pytest.raises(LaunchError, match="no command"):
        resolve_command([])


@pytest.mark.parametrize(("argv", "needle"), [
    (["--gpus", "2", "--gpus-per-server", "3", "--", "true"], "--gpus 2 and --gpus-per-server 3 disagree"),
    (["--"], "no command"),
    (["--servers", "0", "--", "true"], "--servers 0"),
    (["--link-rate", "10X", "--", "true"], "--link-rate '10X'"),
    (["--intra-rate", "0x", "--", "true"], "--intra-rate '0x': expected a rate like 900M"),
])
def test_run_flag_errors_are_user_errors(argv, needle, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path))
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    with pytest.raises(Exception) as info:  # noqa: B017 - the class varies; is_user_error is what counts
        run_cli.run(parser.parse_args(argv))
    assert getattr(info.value, "is_user_error", False), repr(info.value)
    assert needle in str(info.value)


def test_run_timeout_out_of_range_is_an_argparse_error() -> None:
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    for bad in ("0", "-1", "nan", "inf"):
        with pytest.raises(SystemExit):            # argparse's one-line error naming --timeout, exit 2
            parser.parse_args(["--timeout", bad, "--", "true"])
