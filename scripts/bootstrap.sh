#!/usr/bin/env bash
# Create the project's virtualenv (.venv) with exactly the locked dependencies: requirements-dev.lock
# (the runtime pins of requirements.lock, the dev tools and the build backend). The quickstart and
# the tests both use it; the image installs requirements.lock. Every file is checked against the
# lock's sha256 hashes and nothing is resolved (--no-deps, no isolated build env), so the venv holds
# the locked set whatever a registry serves today. Idempotent: re-installs only when the lock or
# pyproject.toml changed; pip's cache makes a re-install cheap.
source "$(dirname "$0")/lib.sh"
lock="$REPO_ROOT/requirements-dev.lock"
stamp="$VENV/.installed-$(cat "$lock" "$REPO_ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" ]]; then exit 0; fi
command -v java >/dev/null || { log "java is required (Spark runs on a JVM)"; exit 1; }
python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { log "Python 3.11 is required (the lock is resolved for it); found $(python3 --version)"; exit 1; }
log "creating $VENV from requirements-dev.lock"
rm -rf "$VENV"
python3 -m venv "$VENV"
pip=("$VENV/bin/pip" --disable-pip-version-check)
"${pip[@]}" install --quiet --require-hashes --no-deps -r "$lock"
"${pip[@]}" install --quiet --no-deps --no-build-isolation -e "$REPO_ROOT"
"${pip[@]}" check >/dev/null
touch "$stamp"
log "python environment ready"
