"""A hostile tenant's pod trying to join a sync's Spark application as one of its executors.

Any pod of the cluster can reach a driver's service. An executor that registers with the driver
is sent tasks, and a sync's tasks carry its catalog's credentials and its rows: joining is the
prize. The impostor runs in a namespace of its own with the product image, the command and the
environment of the sync's real executor (read from the API, as a tenant who may list pods in
the sync's namespace could), a new executor id, and a choice of what it knows of the
application's secret: nothing (Spark's authentication off, as an attacker would run it), a wrong
secret, or the right one (the control: it shows the same pod does join when it holds the secret).
"""

from __future__ import annotations

from typing import Any

# Where Spark on Kubernetes hands an executor the application's authentication secret.
AUTH_SECRET_ENV = "_SPARK_AUTH_SECRET"
# The executor's Spark settings come as -D options in SPARK_JAVA_OPT_<n> variables.
JAVA_OPT_PREFIX = "SPARK_JAVA_OPT_"
AUTH_OPTIONS = ("-Dspark.authenticate", "-Dspark.network.crypto")
# What CoarseGrainedExecutorBackend logs once the driver accepted its registration.
REGISTERED = "Successfully registered with driver"


def auth_secret(executor: dict[str, Any]) -> str:
    """The application's secret as the real executor pod holds it."""
    (container,) = executor["spec"]["containers"]
    return next(var["value"] for var in container["env"] if var["name"] == AUTH_SECRET_ENV)


def _environment(container: dict[str, Any], executor_id: str, secret: str | None) -> list[dict[str, Any]]:
    environment = []
    for var in container["env"]:
        name, source = var["name"], var.get("valueFrom", {})
        if source and "fieldRef" not in source:
            continue  # a reference to an object of the sync's namespace: not the impostor's to read
        if name == AUTH_SECRET_ENV:
            continue
        if secret is None and name.startswith(JAVA_OPT_PREFIX) and var.get("value", "").startswith(AUTH_OPTIONS):
            continue
        environment.append({"name": name, "value": executor_id} if name == "SPARK_EXECUTOR_ID" else var)
    if secret is not None:
        environment.append({"name": AUTH_SECRET_ENV, "value": secret})
    return environment


def impostor_pod(executor: dict[str, Any], name: str, namespace: str, executor_id: str, secret: str | None,
                 seconds: int) -> dict[str, Any]:
    """A pod in ``namespace`` running ``executor``'s container as executor ``executor_id`` for at most
    ``seconds`` (then exit status 124), holding ``secret`` (None: with Spark's authentication off)."""
    (container,) = executor["spec"]["containers"]
    scratch = {volume["name"] for volume in executor["spec"]["volumes"] if "emptyDir" in volume}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": executor["spec"].get("securityContext", {}),
            "containers": [{
                "name": "impostor",
                "image": container["image"],
                "imagePullPolicy": container.get("imagePullPolicy", "IfNotPresent"),
                "command": ["/usr/bin/tini", "--", "timeout", str(seconds), "/opt/entrypoint.sh"],
                "args": container.get("args", []),
                "env": _environment(container, executor_id, secret),
                "volumeMounts": [mount for mount in container["volumeMounts"] if mount["name"] in scratch],
            }],
            "volumes": [{"name": volume, "emptyDir": {}} for volume in sorted(scratch)],
        },
    }
