"""Shared pytest set-up: markers are declared in pyproject.toml; root-only tests skip clearly without root."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root for network namespaces")
    for item in items:
        if item.get_closest_marker("emu") or item.get_closest_marker("hil"):   # marks, not the folder tests/emu
            item.add_marker(skip)
