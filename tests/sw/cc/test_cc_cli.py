"""``starpulse cc`` command module: table and JSON output, user errors for bad flags."""

from __future__ import annotations

import argparse
import json

import pytest

from sw.cc import CcParamError, cli
from sw.units import UnitError

pytestmark = pytest.mark.unit


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))


def test_sim_json_compares_schemes(capsys):
    assert _run(["sim", "--cc", "hpcc,none", "--flows", "4", "--duration", "1ms", "--flow-size", "64K",
                 "--json"]) == 0
    runs = {r["cc"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["hpcc"]["drops"] == 0 and runs["hpcc"]["completed"] == 4
    assert runs["none"]["link_rate_bps"] == 25_000_000_000
    assert set(runs["hpcc"]) >= {"utilization", "max_queue_bytes", "jain", "completion_ns"}


def test_sim_table(capsys):
    assert _run(["sim", "--cc", "dcqcn", "--flows", "2", "--duration", "500us"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["cc", "drops", "util"] and out[1].startswith("dcqcn")


def test_params_lists_defaults(capsys):
    assert _run(["params", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dcqcn"]["g_shift"] == 8 and data["hpcc"]["max_stage"] == 5


@pytest.mark.parametrize(("argv", "exc", "text"), [
    (["sim", "--cc", "cubic"], CcParamError, "--cc 'cubic'"),
    (["sim", "--link-rate", "10X"], UnitError, "--link-rate"),
    (["sim", "--flows", "0"], CcParamError, "--flows 0"),
])
def test_bad_flags_are_user_errors(argv, exc, text):
    with pytest.raises(exc) as err:
        _run(argv)
    assert err.value.is_user_error and text in str(err.value)
