#!/usr/bin/env bash
# Prometheus and promtool for the metrics tests (tests/integration/test_job_metrics_prometheus.py, the
# PrometheusRule unit tests), from Debian's `prometheus` package, unpacked into the cache without installing
# it: `apt-get download` of the exactly pinned .deb, checked against its sha256, then `dpkg -x` into
# $ICEBERGSYNC_CACHE/prometheus/<version>/ (scripts/infra/debs.sh). Both binaries are static Go programs:
# none of the package's web-console dependencies are needed. Idempotent: skipped when the stamp matches.
#
#   scripts/infra/prometheus.sh         fetch and unpack (quiet when cached)
#   scripts/infra/prometheus.sh --env   also print PROMETHEUS_BIN=... and PROMTOOL_BIN=...
source "$(dirname "$0")/../lib.sh"

PROMETHEUS_VERSION="2.42.0+ds-5+deb12u1"
# package=version -> sha256 of the .deb (Debian bookworm, amd64)
declare -A PROMETHEUS_DEBS=(
  ["prometheus=$PROMETHEUS_VERSION"]=81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55
)

DEST="$ICEBERGSYNC_CACHE/prometheus/$PROMETHEUS_VERSION"

source "$(dirname "$0")/debs.sh"
debs_unpack "Prometheus $PROMETHEUS_VERSION" "$DEST" PROMETHEUS_DEBS
"$DEST/usr/bin/promtool" --version >/dev/null 2>&1 || { log "prometheus.sh: $DEST/usr/bin/promtool does not run"; exit 1; }
if [[ "${1:-}" == "--env" ]]; then
  echo "PROMETHEUS_BIN=$DEST/usr/bin/prometheus"
  echo "PROMTOOL_BIN=$DEST/usr/bin/promtool"
fi
