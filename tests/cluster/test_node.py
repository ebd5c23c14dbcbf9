"""The one-node cluster runs pods for real: the scheduler places them, the kubelet starts them in
containerd on the CNI bridge, kube-proxy routes Services, CoreDNS resolves Service names, and the
API server streams container logs from the kubelet.

The probes run the pinned kubectl (a static binary, the tier's ``kubectl`` image) inside pods.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.infra.cluster import NodeCluster

K8S_VERSION = "v1.35.4"
KUBECTL_IMAGE = "icebergsync.local/kubectl:v1.35.4"
POD_SECONDS = "180s"


def kubectl_pod(name: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod that runs the pinned kubectl with ``args`` (restarted until it exits 0)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            # Retried until it succeeds: a Service's iptables rules may lag its pod's readiness.
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "kubectl",
                    "image": KUBECTL_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": args,
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                }
            ],
        },
    }


def run_to_completion(cluster: NodeCluster, namespace: str, pod: dict[str, Any]) -> str:
    """Create ``pod``, wait until it Succeeded, return its log as read through the API server."""
    name = pod["metadata"]["name"]
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(pod))
    cluster.kubectl(
        "-n",
        namespace,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        f"pod/{name}",
        f"--timeout={POD_SECONDS}",
        timeout=240,
    )
    return cluster.kubectl("-n", namespace, "logs", f"pod/{name}")


def test_node_registers_ready_with_the_pinned_version(node_cluster: NodeCluster) -> None:
    node = json.loads(node_cluster.kubectl("get", "node", node_cluster.node_name, "-o", "json"))
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert conditions["Ready"] == "True"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == K8S_VERSION
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert addresses["InternalIP"] == node_cluster.node_ip


def test_pod_reaches_the_api_server_by_its_service_dns_name(
    node_cluster: NodeCluster, namespace: str
) -> None:
    # In-cluster config, but the API server addressed by name: CoreDNS resolves it, kube-proxy
    # routes the `kubernetes` Service, the pod's ServiceAccount token authenticates.
    pod = kubectl_pod(
        "api-by-name",
        ["get", "--raw", "/version"],
        env={"KUBERNETES_SERVICE_HOST": "kubernetes.default.svc.cluster.local"},
    )
    version = json.loads(run_to_completion(node_cluster, namespace, pod))
    assert version["gitVersion"] == K8S_VERSION


def test_pod_to_pod_through_a_service_and_from_the_host(node_cluster: NodeCluster, namespace: str) -> None:
    # A pod serves HTTP (kubectl proxy) behind a Service; another pod reaches it by the Service's
    # short name (search path of the pod's resolv.conf), and the host reaches its ClusterIP.
    server = kubectl_pod("api-proxy", ["proxy", "--address=0.0.0.0", "--port=8001", "--accept-hosts=.*"])
    server["metadata"]["labels"] = {"app": "api-proxy"}
    server["spec"]["restartPolicy"] = "Always"
    server["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8001}, "periodSeconds": 1}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "api-proxy"},
        "spec": {"selector": {"app": "api-proxy"}, "ports": [{"port": 80, "targetPort": 8001}]},
    }
    node_cluster.kubectl(
        "-n",
        namespace,
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [server, service]}),
    )
    node_cluster.kubectl(
        "-n",
        namespace,
        "wait",
        "--for=condition=Ready",
        "pod/api-proxy",
        f"--timeout={POD_SECONDS}",
        timeout=240,
    )

    client = kubectl_pod("client", ["--server=http://api-proxy", "get", "--raw", "/version"])
    client["spec"]["automountServiceAccountToken"] = False
    assert json.loads(run_to_completion(node_cluster, namespace, client))["gitVersion"] == K8S_VERSION

    cluster_ip = node_cluster.kubectl(
        "-n", namespace, "get", "service", "api-proxy", "-o", "jsonpath={.spec.clusterIP}"
    )
    with urllib.request.urlopen(f"http://{cluster_ip}/version", timeout=30) as response:
        assert json.loads(response.read())["gitVersion"] == K8S_VERSION
