#!/usr/bin/env bash
# The quickstart: install what the job needs, run examples/quickstart.yaml on the embedded
# default (local Spark, SQLite catalog, local warehouse, generator source), then print the status
# read from the table. Running it again resumes from the table and finds nothing left to do.
source "$(dirname "$0")/lib.sh"
"$REPO_ROOT/scripts/bootstrap.sh"
cd "$REPO_ROOT"
spec="${1:-examples/quickstart.yaml}"
log "running $spec (local Spark; the table lives under .icebergsync/)"
"$VENV/bin/icebergsync" run "$spec"
log "status read from the table:"
"$VENV/bin/icebergsync" status "$spec"
