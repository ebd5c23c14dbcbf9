"""The cluster tier: what runs in containers and pods (the built image, the one-node cluster).
Every test under tests/cluster/ carries the ``cluster`` marker (``-m cluster`` / ``-m "not cluster"``)."""

from __future__ import annotations

from pathlib import Path

import pytest

TIER_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark this directory's tests as the cluster tier."""
    for item in items:
        if TIER_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.cluster)
