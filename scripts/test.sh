#!/usr/bin/env bash
# The whole test suite: installs/builds every test dependency (cached under $ICEBERGSYNC_CACHE),
# runs lint and type checks, then pytest over tests/ (unit, integration with real Spark, Kafka,
# REST catalog and MinIO, e2e against a real kube-apiserver with helm and the real Spark Operator
# controller, and cluster: the built image in containers and pods on a real one-node Kubernetes
# cluster, see docs/testing-infra-cluster.md and docs/image.md). Extra arguments go to pytest.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
"$REPO_ROOT/scripts/bootstrap.sh"
log "test dependencies: Spark jars, Kafka, REST catalog, Debezium, PostgreSQL, MinIO"
bash "$REPO_ROOT/scripts/infra/services.sh"
log "test dependencies: etcd, kube-apiserver, helm, Spark Operator (controller and CRDs)"
bash "$REPO_ROOT/scripts/infra/kube-tools.sh"
log "test dependencies: the one-node cluster (containerd, kubelet, kube-proxy, controllers, CoreDNS, images)"
bash "$REPO_ROOT/scripts/infra/cluster.sh" build
log "the image: the project's Docker engine, a debootstrap base, docker build and save (docs/image.md)"
engine="$REPO_ROOT/scripts/infra/docker-engine.sh"
engine_was_running=0
bash "$engine" status >/dev/null 2>&1 && engine_was_running=1
bash "$REPO_ROOT/scripts/infra/image.sh" save
# The tests start the engine again when they need it; stop what this script started.
[[ $engine_was_running -eq 1 ]] || bash "$engine" stop
log "lint (ruff) and types (mypy)"
"$VENV/bin/ruff" check .
"$VENV/bin/mypy"
log "pytest"
# A private temp dir: concurrent pytest runs on one machine would otherwise prune each other's.
basetemp="$(mktemp -d)"
trap 'rm -rf "$basetemp"' EXIT
status=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 --durations=25 --basetemp="$basetemp/pytest" "$@" || status=$?
if [[ $status -eq 5 ]]; then
  log "pytest collected no tests: that is a failure"
  exit 1
fi
exit $status
