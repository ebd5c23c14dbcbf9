# Shared helpers for the project's scripts (sourced, not run).
# Everything heavy is cached under $ICEBERGSYNC_CACHE so a second run reuses it.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ICEBERGSYNC_CACHE="${ICEBERGSYNC_CACHE:-$HOME/.cache/icebergsync}"
VENV="${ICEBERGSYNC_VENV:-$REPO_ROOT/.venv}"
mkdir -p "$ICEBERGSYNC_CACHE"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The lock resolver of scripts/lock.sh and bench/lock.sh: uv at one pinned version, in a tool venv
# under the cache (made on first use). Prints the path of the uv binary.
UV_VERSION=0.13.9
uv_binary() {
  local tool="$ICEBERGSYNC_CACHE/tools/uv-$UV_VERSION"
  if [[ ! -x "$tool/bin/uv" ]]; then
    python3 -m venv "$tool" >&2
    "$tool/bin/pip" install --quiet "uv==$UV_VERSION" >&2
  fi
  echo "$tool/bin/uv"
}
