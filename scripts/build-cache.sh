# Sourced by scripts/k8s-bins.sh and scripts/tool-bins.sh: one cache
# directory per key under ${CANADA_KAKTUS_CACHE_DIR:-~/.cache/canada-kaktus},
# built at most once at a time. The sourcing script defines log().
#
#   cache_open KEY BINARY...   checks that Go is installed and sets out_dir,
#                              bin_dir and stamp; when every BINARY is already
#                              built it prints bin_dir and exits the script;
#                              otherwise it returns holding the build lock (a
#                              second caller waits and then finds the finished
#                              binaries), with an empty $work and
#                              $bin_dir.tmp, $start_time set and Go set up for
#                              static builds from the module proxy.
#   cache_close SUMMARY        marks the build complete and prints bin_dir.

cache_complete() {
  local binary
  [[ -f "$stamp" ]] || return 1
  for binary in "${cache_binaries[@]}"; do
    [[ -x "$bin_dir/$binary" ]] || return 1
  done
}

cache_open() {
  command -v go >/dev/null 2>&1 || {
    log "go is not installed (need Go >= 1.26)"
    exit 1
  }
  local key="$1"
  shift
  cache_binaries=("$@")
  local cache_root="${CANADA_KAKTUS_CACHE_DIR:-$HOME/.cache/canada-kaktus}"
  out_dir="${cache_root}/${key}"
  bin_dir="${out_dir}/bin"
  stamp="${out_dir}/.complete"
  if cache_complete; then
    log "using cached binaries in $bin_dir"
    printf '%s\n' "$bin_dir"
    exit 0
  fi
  mkdir -p "$cache_root"
  exec 9>"${cache_root}/.${key}.lock"
  flock 9
  if cache_complete; then
    log "using cached binaries in $bin_dir (built by a concurrent run)"
    printf '%s\n' "$bin_dir"
    exit 0
  fi
  start_time=$SECONDS
  work="${out_dir}/work"
  rm -rf "$work" "$bin_dir" "$bin_dir.tmp" "$stamp"
  mkdir -p "$work" "$bin_dir.tmp"
  export CGO_ENABLED=0
  # Module proxy downloads are verified against the checksum database as usual.
  export GOFLAGS="-mod=mod -buildvcs=false"
}

cache_close() {
  mv "$bin_dir.tmp" "$bin_dir"
  rm -rf "${out_dir}/work"
  printf '%s\n' "$1" >"$stamp"
  log "built everything into $bin_dir: $1"
  printf '%s\n' "$bin_dir"
}
