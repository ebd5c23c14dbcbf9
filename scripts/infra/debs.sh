# Sourced by the scripts that unpack pinned Debian packages into the cache (postgres.sh, mariadb.sh):
# `apt-get download` of exactly pinned .deb files, each checked against its sha256, then `dpkg -x`
# into one tree, published atomically with a stamp keyed by the pins. Nothing is installed.

debs_key() { # name -> the stamp of the pins in the associative array it names (package=version -> sha256)
  local -n pins="$1"
  printf '%s\n' "${!pins[@]}" "${pins[@]}" | LC_ALL=C sort | sha256sum | cut -c1-16
}

debs_unpack() { # label dest pins_array_name: fetch, check and unpack the pinned .debs into dest, unless its stamp matches
  local label="$1" dest="$2" tmp spec deb key
  local -n debs="$3"
  key="$(debs_key "$3")"
  [[ -f "$dest/.stamp" && "$(cat "$dest/.stamp")" == "$key" ]] && return 0
  command -v apt-get >/dev/null && command -v dpkg >/dev/null || { log "$label: needs Debian's apt-get and dpkg"; return 1; }
  log "fetching $label from Debian's packages"
  mkdir -p "$(dirname "$dest")"
  tmp="$(mktemp -d "$(dirname "$dest")/.debs.XXXXXX")"
  chmod 755 "$tmp"  # apt's download sandbox user must be able to write here
  for spec in "${!debs[@]}"; do
    ( cd "$tmp" && apt-get download -q "$spec" >/dev/null 2>"$tmp/apt.err" ) \
      || ( apt-get update -q >/dev/null 2>&1; cd "$tmp" && apt-get download -q "$spec" >/dev/null ) \
      || { cat "$tmp/apt.err" >&2; rm -rf "$tmp"; log "$label: apt-get download $spec failed"; return 1; }
    deb="$(ls "$tmp"/"${spec%%=*}"_*.deb)"
    if [[ "$(sha256sum "$deb" | cut -d' ' -f1)" != "${debs[$spec]}" ]]; then
      rm -rf "$tmp"; log "$label: $spec: sha256 mismatch"; return 1
    fi
    dpkg -x "$deb" "$tmp/root"
  done
  echo "$key" >"$tmp/root/.stamp"
  rm -rf "$dest"
  mv "$tmp/root" "$dest"
  rm -rf "$tmp"
  log "  $(du -sh "$dest" | cut -f1) in $dest"
}

debs_check_libraries() { # label libdir binary...: every library the binaries link is found (with libdir first)
  local label="$1" lib="$2" missing
  shift 2
  missing="$(LD_LIBRARY_PATH="$lib" ldd "$@" | awk '/not found/ {print $1}' | sort -u | paste -sd' ' -)"
  [[ -z "$missing" ]] || { log "$label: libraries missing on this machine: $missing (apt-get install the packages that hold them)"; return 1; }
}
