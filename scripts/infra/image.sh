#!/usr/bin/env bash
# The project's image, built without any registry: Dockerfile on a debootstrap base
# (scripts/infra/base-image.sh) in the project's own engine (scripts/infra/docker-engine.sh).
#
#   scripts/infra/image.sh build   build $IMAGE unless an image of the same inputs exists
#   scripts/infra/image.sh save    build, then write $TARBALL (docker-archive) unless it is current
#   scripts/infra/image.sh env     print IMAGE=, TARBALL=, DOCKER_HOST= (builds nothing)
#
# Inputs (their hash labels the image and names the tarball's stamp): the Dockerfile, the
# entrypoint, the locks, pyproject.toml, the Maven poms, the Python sources and the base image
# script. A run with nothing changed does nothing. The tarball is what the cluster tier loads into
# containerd (`ctr -n k8s.io images import "$TARBALL"`); the image is tagged as containerd names it.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

IMAGE="docker.io/library/icebergsync:dev"
IMAGE_DIR="$ICEBERGSYNC_CACHE/image"
TARBALL="$IMAGE_DIR/icebergsync-dev.tar"
ENGINE="$REPO_ROOT/scripts/infra/docker-engine.sh"
INPUT_LABEL="io.icebergsync.inputs"
eval "$(bash "$ENGINE" env | sed 's/^/export /')"
# Debian's engine (20.10) has the classic builder; BuildKit would want a frontend image from a registry.
export DOCKER_BUILDKIT=0

inputs_key() {
  cd "$REPO_ROOT"
  {
    sha256sum Dockerfile docker/entrypoint.sh requirements.lock requirements-dev.lock pyproject.toml \
      scripts/infra/base-image.sh
    find icebergsync spark_app operator -type f \( -name '*.py' -o -name py.typed \) -not -path '*/__pycache__/*' \
      | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -c1-16
}

current_image_key() { docker image inspect --format "{{index .Config.Labels \"$INPUT_LABEL\"}}" "$IMAGE" 2>/dev/null; }

do_build() {
  local key base started previous
  key="$(inputs_key)"
  bash "$ENGINE" start
  [[ "$(current_image_key)" == "$key" ]] && return 0
  previous="$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
  base="$(bash "$REPO_ROOT/scripts/infra/base-image.sh")"
  # The build stage trusts the host's extra CAs (a TLS-intercepting proxy) for pip.
  find "$REPO_ROOT/docker/ca-certificates" -name '*.crt' -delete
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$REPO_ROOT/docker/ca-certificates/"
  fi
  log "building $IMAGE from $base (inputs $key; ~15 min cold on 2 cores)"
  started=$(date +%s)
  docker build --network=host --build-arg "BASE_IMAGE=$base" --label "$INPUT_LABEL=$key" \
    -t "$IMAGE" "$REPO_ROOT" >"$IMAGE_DIR/build.log" 2>&1 || {
      tail -40 "$IMAGE_DIR/build.log" >&2
      log "docker build failed; the whole log is $IMAGE_DIR/build.log"
      return 1
    }
  # The previous image and its own layers; the build stages' cached layers stay for the next build.
  [[ -n "$previous" && "$previous" != "$(docker image inspect --format '{{.Id}}' "$IMAGE")" ]] \
    && docker rmi "$previous" >/dev/null 2>&1 || true
  log "  built in $(( $(date +%s) - started ))s: $(docker image inspect --format '{{.Size}}' "$IMAGE" \
    | awk '{printf "%.0f MB", $1 / 1e6}')"
}

do_save() {
  local key tmp
  do_build
  key="$(current_image_key)"
  [[ -f "$TARBALL" && "$(cat "$TARBALL.inputs" 2>/dev/null)" == "$key" ]] && return 0
  log "docker save $IMAGE -> $TARBALL"
  tmp="$(mktemp "$IMAGE_DIR/.save.XXXXXX")"
  docker save -o "$tmp" "$IMAGE"
  mv "$tmp" "$TARBALL"
  echo "$key" >"$TARBALL.inputs"
}

mkdir -p "$IMAGE_DIR"
case "${1:-}" in
  build|save)
    exec 7>"$IMAGE_DIR/.lock"
    flock 7
    "do_$1" ;;
  env) printf 'IMAGE=%s\nTARBALL=%s\nDOCKER_HOST=%s\n' "$IMAGE" "$TARBALL" "$DOCKER_HOST" ;;
  *) sed -n '2,13p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
