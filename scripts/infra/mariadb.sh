#!/usr/bin/env bash
# MariaDB server binaries for the MariaDB CDC tests, from Debian's packages, unpacked into the cache
# without installing them: `apt-get download` of exactly pinned .deb files, checked against their
# sha256, then `dpkg -x` into $ICEBERGSYNC_CACHE/mariadb/<version>/ (scripts/infra/debs.sh).
# Idempotent: skipped when the stamp matches this script's pins.
#
#   scripts/infra/mariadb.sh           fetch and unpack (quiet when cached)
#   scripts/infra/mariadb.sh --env     also print MARIADB_ROOT=... (the unpacked tree) and MARIADB_LIB=...
#
# MariaDB runs relocated: the tests start usr/sbin/mariadbd with --basedir=<tree>/usr (it then finds its
# error messages and charsets under usr/share/mysql) and bootstrap a datadir with usr/bin/mariadb-install-db
# --basedir. libaio and liburing, which bookworm does not install by default, are unpacked beside it (MARIADB_LIB);
# the other libraries (libc, OpenSSL, PCRE2, zlib, systemd, numa) come from the machine: a missing one is
# reported with its name. bookworm has no MySQL server package (mysql-server, mysql-server-core-8.0: no
# candidate), so MariaDB is the only server of this family the suite can run.
source "$(dirname "$0")/../lib.sh"

MARIADB_VERSION="1:10.11.19-0+deb12u1"
# package=version -> sha256 of the .deb (Debian bookworm-security, amd64)
declare -A MARIADB_DEBS=(
  ["mariadb-server-core=$MARIADB_VERSION"]=bda81cb1c5b538e19eed27462fa8df577684b9cdc4fe40cee8d1da9cbc0fe76b
  ["mariadb-client-core=$MARIADB_VERSION"]=60549abde2ad55068610b2cae03af7d17a2cafb0993f16c8c2413bd1b5fe6f5f
  ["libaio1=0.3.113-4"]=d1476e4beab3d85f8a7d31de94c27472711ed3ef399ce70708e24b259426125b
  ["liburing2=2.3-3"]=c23077e3640e6cb4b819c134b3f41d5cf21b3edac099654b1b4142c3069a39a3
)

DEST="$ICEBERGSYNC_CACHE/mariadb/${MARIADB_VERSION#*:}"
LIB="$DEST/usr/lib/x86_64-linux-gnu"

source "$(dirname "$0")/debs.sh"
debs_unpack "MariaDB $MARIADB_VERSION" "$DEST" MARIADB_DEBS
debs_check_libraries mariadb.sh "$LIB" "$DEST/usr/sbin/mariadbd" "$DEST/usr/bin/mariadb"
if [[ "${1:-}" == "--env" ]]; then
  echo "MARIADB_ROOT=$DEST"
  echo "MARIADB_LIB=$LIB"
fi
