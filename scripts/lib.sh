# Shared helpers for the project's scripts (sourced, not run).
# Everything heavy is cached under $ICEBERGSYNC_CACHE so a second run reuses it.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ICEBERGSYNC_CACHE="${ICEBERGSYNC_CACHE:-$HOME/.cache/icebergsync}"
VENV="${ICEBERGSYNC_VENV:-$REPO_ROOT/.venv}"
mkdir -p "$ICEBERGSYNC_CACHE"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
