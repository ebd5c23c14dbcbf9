#!/usr/bin/env bash
# Create the project's virtualenv (.venv) with pinned dependencies. Idempotent: re-runs only
# when pyproject.toml changed; pip's cache makes a re-install cheap.
source "$(dirname "$0")/lib.sh"
stamp="$VENV/.installed-$(sha256sum "$REPO_ROOT/pyproject.toml" | cut -c1-16)"
if [[ -f "$stamp" ]]; then exit 0; fi
command -v java >/dev/null || { log "java is required (Spark runs on a JVM)"; exit 1; }
log "creating $VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet -e "$REPO_ROOT[dev]"
rm -f "$VENV"/.installed-*
touch "$stamp"
log "python environment ready"
