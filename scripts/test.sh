#!/usr/bin/env bash
# The whole test suite: installs/builds every test dependency (cached under $ICEBERGSYNC_CACHE),
# runs lint and type checks, then pytest over tests/ (unit, integration with real Spark, Kafka,
# REST catalog and MinIO, e2e against a real kube-apiserver with helm and the real Spark Operator
# controller, and cluster: the built image in containers and pods on a real one-node Kubernetes
# cluster, see docs/testing-infra-cluster.md and docs/image.md). Extra arguments go to pytest.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
"$REPO_ROOT/scripts/bootstrap.sh"
log "test dependencies: Spark jars, Kafka, REST catalog, Debezium, PostgreSQL, MariaDB, Prometheus, MinIO, Schema Registry"
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
run_pytest() {  # run_pytest NAME ARGS...: one pytest process with its own temp dir; 5 (no test collected) fails
  local name=$1 status=0
  shift
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 --durations=25 \
    --basetemp="$basetemp/$name" "$@" || status=$?
  if [[ $status -eq 5 ]]; then
    log "pytest ($name) collected no tests: that is a failure"
    return 1
  fi
  return $status
}
if [[ $# -gt 0 ]]; then
  run_pytest pytest "$@"
  exit $?
fi
# The whole suite as two processes side by side: the tiers that mostly wait (e2e: an API server and operators;
# cluster: pods being scheduled and started) beside the tiers that compute (unit, integration: Spark). Each
# tier's servers are its own (free ports; the cluster tier alone uses the machine's one-node cluster and the
# Docker engine). docs/testing-time.md has the figures.
computing=(tests/unit tests/integration)
waiting=(tests/e2e tests/cluster)
not_in_tiers=()
for tier in "${computing[@]}" "${waiting[@]}"; do not_in_tiers+=(-not -path "$tier/*"); done
outside="$(find tests -name 'test_*.py' "${not_in_tiers[@]}")"
if [[ -n $outside ]]; then
  log "tests outside the four tiers would not run; add their folder to scripts/test.sh: $outside"
  exit 1
fi
log "pytest: ${waiting[*]} in a second process beside ${computing[*]} (its output follows the first's)"
run_pytest waiting "${waiting[@]}" >"$basetemp/waiting.log" 2>&1 &
waiting_pid=$!
computing_status=0
run_pytest computing "${computing[@]}" || computing_status=$?
waiting_status=0
wait "$waiting_pid" || waiting_status=$?
log "pytest: ${waiting[*]}"
cat "$basetemp/waiting.log"
log "pytest exit statuses: ${computing[*]} $computing_status; ${waiting[*]} $waiting_status"
[[ $computing_status -eq 0 && $waiting_status -eq 0 ]]
