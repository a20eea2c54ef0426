"""pytest plugin shipped with the package: fixtures for emulation tests of your own, as the project's tests write them.

Installing the package registers it (entry point ``pytest11``: ``starpulse``); without the installed package list
it in a ``conftest.py``: ``pytest_plugins = ["emu.pytest_plugin"]``.

    import pytest

    @pytest.mark.fabric(servers=2, gpus_per_server=2, spines=1, link_rate="10M")
    def test_cross_rail_ping(fabric):
        assert " 0% packet loss" in fabric.run("s0", "ping -c1 -W2 s1:1")

- ``fabric``: an ``emu.fabric.Fabric`` that is up for the test, built from the ``fabric`` marker's options
  (``starpulse fabric up``'s flags in keyword form; none: the CLI's defaults), torn down afterwards, also when
  the test fails or is interrupted;
- ``fabric_factory``: ``fabric_factory(**options)`` brings up as many fabrics as a test needs, all torn down.

Both skip the test when not run as root (network namespaces need it), and restore the process's clock and
$STARPULSE_TIME_DILATION afterwards.  Without ``time_dilation=`` (or $STARPULSE_TIME_DILATION) each fabric
calibrates its dilation first, as ``fabric up`` does; pin it to skip that.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fabric(**options): the topology of the `fabric` fixture (fabric up's flags "
                                       "in keyword form, e.g. servers=2, link_rate='10M')")


@pytest.fixture
def fabric_factory() -> Iterator[Callable[..., Any]]:
    """``make(**options)`` -> a ``Fabric`` already up; every one made is torn down at the end of the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    from emu.fabric import Fabric
    from sw.clock import ENV_DILATION, get_clock, set_clock

    made: list[Fabric] = []
    clock, dilation_env = get_clock(), os.environ.get(ENV_DILATION)   # up() sets both (as fabric up does)

    def make(**options: Any) -> Fabric:
        fab = Fabric(**options)
        made.append(fab)
        fab.up()
        return fab

    try:
        yield make
    finally:
        for fab in reversed(made):
            fab.down()
        set_clock(clock)
        if dilation_env is None:
            os.environ.pop(ENV_DILATION, None)
        else:
            os.environ[ENV_DILATION] = dilation_env


@pytest.fixture
def fabric(request: pytest.FixtureRequest, fabric_factory: Callable[..., Any]) -> Any:
    """A ``Fabric`` up for this test, from ``@pytest.mark.fabric(**options)`` (default: fabric up's defaults)."""
    marker = request.node.get_closest_marker("fabric")
    return fabric_factory(**(marker.kwargs if marker else {}))
