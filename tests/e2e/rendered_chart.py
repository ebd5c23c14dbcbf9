"""The chart as rendered, on the test API server: its default values rendered by the real ``helm
template``, every rendered object and the chart's CRDs applied, and the operator run as a subprocess
with exactly the rendered Deployment's container args and env, so it holds only the chart's RBAC.

What a pod gives and a subprocess lacks is stood in for, and nothing else:

* the ServiceAccount token: one minted by the TokenRequest API for the rendered ServiceAccount, in a
  kubeconfig whose context namespace is the release namespace (the pod's in-cluster namespace);
* the pod IP (the env's ``status.podIP`` reference, expanded into ``$(ICEBERGSYNC_POD_IP)`` as the
  kubelet does): a random 127.0.0.0/8 address, which keeps the rendered ports (the pod's own network
  namespace) without clashing with anything else on the machine;
* the image: its ``PATH`` (this virtualenv's bin first, where ``icebergsync-operator`` is installed)
  and ``PYTHONUNBUFFERED``; its working directory is a fresh one.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import sys
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient

from tests.e2e.conftest import OperatorProcess
from tests.infra.kube import KubeCluster, _write_kubeconfig
from tests.unit.test_chart import CHART, NAMESPACE, container, one

FIELD_MANAGER = "icebergsync-chart-tier"
TOKEN_SECONDS = 3600
IMAGE_ENV = {"PYTHONUNBUFFERED": "1"}  #: the image's ENV the operator relies on, besides PATH
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def apply_objects(api: client.ApiClient, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Server-side apply every rendered object (as the admin); returns the cluster-scoped ones."""
    dynamic = DynamicClient(api)
    cluster_scoped = []
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        resource.server_side_apply(body=doc, namespace=doc["metadata"].get("namespace"),
                                   field_manager=FIELD_MANAGER, force_conflicts=True)
        if not resource.namespaced:
            cluster_scoped.append(doc)
    return cluster_scoped


def delete_objects(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    """Delete cluster-scoped objects ``apply_objects`` applied (later releases of the chart create them)."""
    dynamic = DynamicClient(api)
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        with contextlib.suppress(client.ApiException):
            resource.delete(name=doc["metadata"]["name"])


def service_account_token(api: client.ApiClient, namespace: str, name: str) -> str:
    """A token of the ServiceAccount, from the TokenRequest API (what the kubelet mounts into its pods)."""
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=TOKEN_SECONDS))
    status = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request).status
    assert status is not None
    return str(status.token)


def pod_address(ports: list[int]) -> str:
    """A loopback address (127.0.0.0/8) where every one of ``ports`` is free: the pod's own IP."""
    for _ in range(100):
        address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        with contextlib.ExitStack() as sockets:
            try:
                for port in ports:
                    sockets.enter_context(socket.create_server((address, port)))
            except OSError:
                continue
            return address
    raise AssertionError(f"no loopback address with ports {ports} free")


def container_env(spec: dict[str, Any], pod_ip: str) -> dict[str, str]:
    """The container's env as the kubelet sets it: ``status.podIP`` resolved, ``$(VAR)`` expanded."""
    env: dict[str, str] = {}
    for item in spec["env"]:
        if "value" in item:
            env[item["name"]] = _REFERENCE.sub(lambda m: env.get(m[1], m[0]), item["value"])
        elif item.get("valueFrom") == {"fieldRef": {"fieldPath": "status.podIP"}}:
            env[item["name"]] = pod_ip
        else:
            raise AssertionError(f"no stand-in for the env entry {item}")
    return env


def chart_operator(cluster: KubeCluster, api: client.ApiClient, docs: list[dict[str, Any]],
                   work_dir: Path) -> OperatorProcess:
    """The rendered Deployment's operator as a subprocess (not started) under its ServiceAccount's token."""
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    spec = container(docs)
    assert "command" not in spec, "the image's entrypoint runs the args"
    token = service_account_token(api, NAMESPACE, pod["serviceAccountName"])
    kubeconfig = work_dir / "kubeconfig"
    _write_kubeconfig(kubeconfig, cluster.server, cluster.ca_file, pod["serviceAccountName"], {"token": token},
                      namespace=NAMESPACE)
    env = container_env(spec, pod_address([port["containerPort"] for port in spec["ports"]]))
    image_path = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    run_env = {**IMAGE_ENV, **env, "PATH": image_path, "KUBECONFIG": str(kubeconfig)}
    metrics = f"http://{env['ICEBERGSYNC_METRICS_ADDRESS']}:{env['ICEBERGSYNC_METRICS_PORT']}/metrics"
    cwd = work_dir / "work-dir"
    cwd.mkdir()
    return OperatorProcess(tuple(spec["args"]), run_env, work_dir / "operator.log",
                           env["ICEBERGSYNC_LIVENESS_ENDPOINT"], metrics, cwd=cwd)


def chart_crds() -> list[Path]:
    """The chart's CRD files (crds/, installed by Helm before the templates)."""
    return sorted((CHART / "crds").glob("*.yaml"))
