"""Fixtures of the cluster tier: a fresh namespace per test on the one-node cluster, the ``cluster``
marker on every test of the tier (``-m cluster`` / ``-m "not cluster"``), and the leftovers check
ordered last (it stops the session's cluster)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.cluster import NodeCluster

TIER_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark this directory's tests; run tests/cluster/test_leftovers.py after every other test."""
    for item in items:
        if TIER_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.cluster)
    items.sort(key=lambda item: item.nodeid.startswith("tests/cluster/test_leftovers.py"))


@pytest.fixture
def namespace(node_cluster: NodeCluster) -> Iterator[str]:
    """A new namespace (with its default ServiceAccount ready), deleted after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    node_cluster.kubectl("create", "namespace", name)
    node_cluster.kubectl("-n", name, "wait", "--for=create", "serviceaccount/default", "--timeout=60s")
    yield name
    node_cluster.kubectl("delete", "namespace", name, "--wait=false")
