#!/usr/bin/env bash
# PostgreSQL server binaries for the CDC tests, from Debian's packages, unpacked into the cache
# without installing them: `apt-get download` of exactly pinned .deb files, checked against their
# sha256, then `dpkg -x` into $ICEBERGSYNC_CACHE/postgres/<version>/ (bin: usr/lib/postgresql/15/bin,
# libpq: usr/lib/x86_64-linux-gnu). Idempotent: skipped when the stamp matches this script's pins.
#
#   scripts/infra/postgres.sh           fetch and unpack (quiet when cached)
#   scripts/infra/postgres.sh --env     also print POSTGRES_BIN=... and POSTGRES_LIB=...
#
# PostgreSQL is relocatable (it finds its share/ next to its bin/), so the unpacked tree runs as it
# is; the libraries it links besides libpq (libc, OpenSSL, ICU, libxml2, ...) come from the machine:
# a missing one is reported with its name. The tests start the server (tests/integration/cdc_postgres/).
source "$(dirname "$0")/../lib.sh"

PG_MAJOR=15
PG_VERSION="15.18-0+deb12u1"
# package=version -> sha256 of the .deb (Debian bookworm, amd64)
declare -A PG_DEBS=(
  ["postgresql-$PG_MAJOR=$PG_VERSION"]=6974c43ddec4f383d099e7d642cd59d0af83c2c90c0fb153a4179aa1bb4d73c1
  ["libpq5=$PG_VERSION"]=baef57c288d7d8c09c84cd461da35d28f981aa71c60448c1d95b52110cc9faf9
)

DEST="$ICEBERGSYNC_CACHE/postgres/$PG_VERSION"
BIN="$DEST/usr/lib/postgresql/$PG_MAJOR/bin"
LIB="$DEST/usr/lib/x86_64-linux-gnu"
KEY="$(printf '%s\n' "${!PG_DEBS[@]}" "${PG_DEBS[@]}" | LC_ALL=C sort | sha256sum | cut -c1-16)"

fetch() {
  local tmp spec deb
  command -v apt-get >/dev/null && command -v dpkg >/dev/null || { log "postgres.sh: needs Debian's apt-get and dpkg"; return 1; }
  log "fetching PostgreSQL $PG_VERSION from Debian's packages"
  mkdir -p "$(dirname "$DEST")"
  tmp="$(mktemp -d "$(dirname "$DEST")/.postgres.XXXXXX")"
  chmod 755 "$tmp"  # apt's download sandbox user must be able to write here
  for spec in "${!PG_DEBS[@]}"; do
    ( cd "$tmp" && apt-get download -q "$spec" >/dev/null 2>"$tmp/apt.err" ) \
      || ( apt-get update -q >/dev/null 2>&1; cd "$tmp" && apt-get download -q "$spec" >/dev/null ) \
      || { cat "$tmp/apt.err" >&2; rm -rf "$tmp"; log "postgres.sh: apt-get download $spec failed"; return 1; }
    deb="$(ls "$tmp"/"${spec%%=*}"_*.deb)"
    if [[ "$(sha256sum "$deb" | cut -d' ' -f1)" != "${PG_DEBS[$spec]}" ]]; then
      rm -rf "$tmp"; log "postgres.sh: $spec: sha256 mismatch"; return 1
    fi
    dpkg -x "$deb" "$tmp/root"
  done
  echo "$KEY" >"$tmp/root/.stamp"
  rm -rf "$DEST"
  mv "$tmp/root" "$DEST"
  rm -rf "$tmp"
  log "  $(du -sh "$DEST" | cut -f1) in $DEST"
}

check_libraries() {
  local missing
  missing="$(LD_LIBRARY_PATH="$LIB" ldd "$BIN/postgres" "$BIN/initdb" | awk '/not found/ {print $1}' | sort -u | paste -sd' ' -)"
  [[ -z "$missing" ]] || { log "postgres.sh: libraries missing on this machine: $missing (apt-get install the packages that hold them)"; return 1; }
}

[[ -f "$DEST/.stamp" && "$(cat "$DEST/.stamp")" == "$KEY" ]] || fetch
check_libraries
if [[ "${1:-}" == "--env" ]]; then
  echo "POSTGRES_BIN=$BIN"
  echo "POSTGRES_LIB=$LIB"
fi
