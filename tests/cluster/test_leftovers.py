"""``cluster.sh stop`` leaves nothing behind: no daemon, pod, shim, mount, cgroup, network
namespace, veth or route. Runs last in the tier (tests/cluster/conftest.py): it stops the cluster."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cluster.test_node import POD_SECONDS, kubectl_pod
from tests.infra.cluster import NodeCluster, stop_node_cluster

NETNS = Path("/run/netns/icebergsync-node")


def processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that contain ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process exited meanwhile
            continue
        if text in args:
            found.append(args)
    return found


def test_stop_leaves_nothing_running(node_cluster: NodeCluster) -> None:
    # Not the `namespace` fixture: its teardown would need the cluster this test stops.
    namespace = "leftovers"
    node_cluster.kubectl("create", "namespace", namespace)
    node_cluster.kubectl("-n", namespace, "wait", "--for=create", "serviceaccount/default", "--timeout=60s")
    container_command = "/kubectl proxy --port=18001"
    pod = kubectl_pod("sleeper", container_command.split()[1:])
    node_cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(pod))
    node_cluster.kubectl(
        "-n",
        namespace,
        "wait",
        "--for=condition=Ready",
        "pod/sleeper",
        f"--timeout={POD_SECONDS}",
        timeout=240,
    )
    assert processes_mentioning(str(node_cluster.state_dir)), "the running cluster should have processes"
    assert processes_mentioning(container_command), "the pod's container should run on this machine"

    stop_node_cluster()

    assert processes_mentioning(str(node_cluster.state_dir)) == []
    assert processes_mentioning(container_command) == []
    assert not NETNS.exists()
    assert not node_cluster.state_dir.exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(node_cluster.state_dir) not in mounts
    assert list(Path("/sys/fs/cgroup").glob("*/icebergsync")) == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    assert "isync-host" not in links
    assert "10.214.0.0/24" not in routes and "10.96.0.0/24" not in routes
