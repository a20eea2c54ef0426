"""The README's "Writing programs" snippets are the files of ``examples/`` (they cannot drift), the collective
example runs under ``starpulse run --local`` (no fabric, no root), and the public names of the two programming
interfaces carry the docstrings ``help()`` shows."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
SNIPPET = re.compile(r"<!-- example: (\S+) -->\n```python\n(.*?)```\n", re.S)
OURS = ("examples/collectives_hello.py", "examples/rdma_write_read.py")


def _snippets() -> dict[str, str]:
    return {path: body for path, body in SNIPPET.findall((REPO / "README.md").read_text())}


def test_every_readme_example_equals_its_file() -> None:
    snippets = _snippets()
    assert set(OURS) <= set(snippets), f"README lacks {set(OURS) - set(snippets)}"
    for path, body in snippets.items():
        assert body == (REPO / path).read_text(), f"README snippet of {path} differs from the file"


def test_collective_example_runs_locally_without_a_fabric(tmp_path) -> None:
    env = {**os.environ, "STARPULSE_STATE_DIR": str(tmp_path / "state"), "STARPULSE_TIMEOUT": "60"}
    done = subprocess.run([sys.executable, "-m", "sw.cli", "run", "--local", "--servers", "2", "--gpus-per-server",
                           "2", "--timeout", "120", "--", "python", OURS[0]], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(4):
        assert f"[rank {rank}] rank {rank}/4: ok (norm 316.228; allreduce algorithms here: ('ring', 'tree', 'rhd', " \
               "'hier', 'hetero'))" in done.stdout, done.stdout
        assert f"[rank {rank}] rank {rank}: refused as expected: op 'avg'" in done.stdout, done.stdout


def test_local_run_refuses_roce_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "sw.cli", "run", "--local", "--net", "roce", "--", "true"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "starpulse run: error: --net roce needs a fabric's NICs: drop --local (or use --net tcp)"]


@pytest.mark.parametrize("package", ["sw.collectives", "sw.roce"])
def test_public_names_are_documented(package: str) -> None:
    module = __import__(package, fromlist=["__all__"])
    assert module.__doc__
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if not attr.startswith("_") and inspect.isfunction(fn) and not (fn.__doc__ or "").strip():
                    missing.append(f"{name}.{attr}")
    assert missing == [], f"{package}: no docstring for {missing}"


def test_verbs_api_is_importable_from_sw_roce_without_loading_it_eagerly() -> None:
    code = ("import sys, sw.roce; eager = 'sw.roce.softnic.nic' in sys.modules; "
            "from sw.roce import QueuePair, open_device;"
            "print(eager, QueuePair.__module__, open_device.__module__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "sw.roce.transport.qp", "sw.roce.softnic.port"], done.stdout + done.stderr


def _algorithms(comm):
    from sw.collectives import CollectiveUserError

    try:
        comm.algorithms("allgatherv")
    except CollectiveUserError as exc:
        return comm.algorithms("allgather"), comm.algorithms("allreduce"), str(exc)
    return None


def test_communicator_lists_the_algorithms_its_layout_can_run() -> None:
    from sw.collectives.local import run_local

    results = run_local(1, 3, _algorithms, timeout_s=60)   # 3 ranks: no recursive halving-doubling allgather
    assert results == [(("ring",), ("ring", "tree", "rhd", "hier", "hetero"),
                        "collective 'allgatherv': unknown (allowed: allreduce, broadcast, reduce, allgather, "
                        "reducescatter, alltoall)")] * 3
