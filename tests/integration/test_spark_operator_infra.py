"""The Spark Operator fixture (tests/infra/spark_operator.py) keeps its promises: the controller
listens on 127.0.0.1 only (no webhook, metrics or pprof server) and is gone after stop()."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from kubernetes import client

from tests.infra.kube import KubeCluster
from tests.infra.spark_operator import SparkOperatorController

TCP_LISTEN = "0A"


def _descendants(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in (task / "children").read_text().split()]
    return children + [grandchild for child in children for grandchild in _descendants(child)]


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _listening_addresses(pids: list[int]) -> set[tuple[str, int]]:
    """(IP as /proc/net/tcp writes it, port) of every TCP socket these processes listen on."""
    inodes = set().union(*(_socket_inodes(pid) for pid in pids))
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == TCP_LISTEN and fields[9] in inodes:
                address, port = fields[1].split(":")
                found.add((address, int(port, 16)))
    return found


def test_controller_listens_on_loopback_only_and_stops(
        kube_cluster: KubeCluster, spark_operator: Callable[[Sequence[str]], SparkOperatorController]) -> None:
    namespace = f"so-{uuid.uuid4().hex[:8]}"
    with kube_cluster.api_client() as api_client:
        client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    controller = spark_operator([namespace])
    pids = [controller.pid, *_descendants(controller.pid)]
    health_port = int(controller.health_url.rsplit(":", 1)[1])

    # 0100007F is 127.0.0.1 in /proc/net/tcp's little-endian hex.
    assert _listening_addresses(pids) == {("0100007F", health_port)}

    controller.stop()
    assert not controller.alive()
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text()]
