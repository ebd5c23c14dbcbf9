#!/usr/bin/env bash
# A Debian bookworm base image made without any registry: `debootstrap --variant=minbase` from the
# Debian mirror, then `docker import` into the project's engine (scripts/infra/docker-engine.sh).
#
#   scripts/infra/base-image.sh          ensure it exists; prints the image name on stdout
#
# The root filesystem tarball is cached in $ICEBERGSYNC_CACHE/base-image/ (keyed by this script),
# so a fresh engine data root only re-imports it; debootstrap runs only when the tarball is missing.
# Same apt sources as debian:bookworm-slim (bookworm, bookworm-updates, bookworm-security).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

SUITE=bookworm
MIRROR="${ICEBERGSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${ICEBERGSYNC_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
KEY="$(cat "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
BASE_IMAGE="icebergsync/debian-base:$SUITE-$KEY"
DIR="$ICEBERGSYNC_CACHE/base-image"
TARBALL="$DIR/$SUITE-minbase-$KEY.tar"

eval "$(bash "$REPO_ROOT/scripts/infra/docker-engine.sh" env | sed 's/^/export /')"
bash "$REPO_ROOT/scripts/infra/docker-engine.sh" start

make_rootfs_tarball() {
  command -v debootstrap >/dev/null || apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends debootstrap >&2
  local tmp; tmp="$(mktemp -d "$DIR/.rootfs.XXXXXX")"
  log "debootstrap --variant=minbase $SUITE (a few minutes)"
  if ! debootstrap --variant=minbase "$SUITE" "$tmp/rootfs" "$MIRROR" >"$tmp/debootstrap.log" 2>&1; then
    tail -20 "$tmp/debootstrap.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  cat >"$tmp/rootfs/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
  # What the slim images drop: package caches, lists and docs the image never needs.
  rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"* \
    "$tmp/rootfs/usr/share/doc/"* "$tmp/rootfs/usr/share/man/"* "$tmp/rootfs/var/log/"*.log
  tar --numeric-owner -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
  mv "$tmp/rootfs.tar" "$TARBALL"
  rm -rf "$tmp"
}

mkdir -p "$DIR"
exec 8>"$DIR/.lock"
flock 8
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  [[ -f "$TARBALL" ]] || make_rootfs_tarball
  log "docker import $TARBALL as $BASE_IMAGE"
  docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$TARBALL" "$BASE_IMAGE" >/dev/null
  # Older tarballs (another key) are not needed any more.
  find "$DIR" -maxdepth 1 -name "$SUITE-minbase-*.tar" ! -name "$(basename "$TARBALL")" -delete
fi
echo "$BASE_IMAGE"
