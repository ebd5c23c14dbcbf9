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

source "$(dirname "$0")/debs.sh"
debs_unpack "PostgreSQL $PG_VERSION" "$DEST" PG_DEBS
debs_check_libraries postgres.sh "$LIB" "$BIN/postgres" "$BIN/initdb"
if [[ "${1:-}" == "--env" ]]; then
  echo "POSTGRES_BIN=$BIN"
  echo "POSTGRES_LIB=$LIB"
fi
