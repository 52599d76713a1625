#!/usr/bin/env bash
# Builds (or reuses from a cache) tests/cilium-lbipam: Cilium's LB IPAM
# allocator (github.com/cilium/cilium/operator/pkg/lbipam) as a program of
# its own, so the end-to-end tests can show that a LoadBalancer Service
# really gets an address from the pool canada-kaktus writes.
#
# One build per Cilium release named as an argument, else per supported
# release (CILIUM_RELEASES in scripts/supported-versions.sh; scripts/demo
# names only the newest, and reuses a complete build of them all), each in
# a folder named by its minor:
#   <bin dir>/v1.20/, v1.19/, v1.18/   cilium.io/v2 pools
#   <bin dir>/v1.15/                   cilium.io/v2alpha1 pools only
# each with `cilium-lbipam`, the CiliumLoadBalancerIPPool CRD that release
# ships (`ciliumloadbalancerippools.yaml`, copied from the module), `release`
# (the Cilium version) and `api` (the pool API version it serves first).
# `v2` and `v2alpha1` link to the newest release of each API version, for
# the suites that run once per API version. The last line on stdout is
# <bin dir>.
#
# The Go proxy serves these releases of the module; the whole
# cilium-operator does not build from it (some of its dependencies are not
# served), the lbipam package does. The module graph cannot be tidied for
# the same reason, so the build resolves only what the program imports
# (-mod=mod, checksums verified as usual). Harnesses: tests/cilium-lbipam/
# v1.15 for 1.15, v1.20 for 1.18 and later (1.18 with the build tag
# cilium_1_18).
set -euo pipefail

log() { printf 'cilium-bins: %s\n' "$*" >&2; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/supported-versions.sh
source "$here/supported-versions.sh"
harness="$(cd "$here/../tests/cilium-lbipam" && pwd)"
# The harness sources and this script are part of the key: a change to
# either is built again.
src_hash="$(cat "$harness"/*/*.go "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"

minor() { # v1.20.2 -> v1.20
  cut -d. -f1,2 <<<"$1"
}

releases=("$@")
if [ "${#releases[@]}" -eq 0 ]; then
  releases=("${CILIUM_RELEASES[@]}")
fi
cache_key() { # RELEASE... -> the cache folder's name
  echo "cilium-lbipam-$(IFS=-; echo "$*")-${src_hash}"
}
# A complete build of every supported release serves any subset.
all="${CANADA_KAKTUS_CACHE_DIR:-$HOME/.cache/canada-kaktus}/$(cache_key "${CILIUM_RELEASES[@]}")"
if [ -f "$all/.complete" ]; then
  served=true
  for release in "${releases[@]}"; do
    [ -x "$all/bin/$(minor "$release")/cilium-lbipam" ] || served=false
  done
  if $served; then
    log "using cached binaries in $all/bin"
    printf '%s\n' "$all/bin"
    exit 0
  fi
fi

binaries=()
for release in "${releases[@]}"; do
  binaries+=("$(minor "$release")/cilium-lbipam")
done
# shellcheck source=scripts/build-cache.sh
source "$here/build-cache.sh"
cache_open "$(cache_key "${releases[@]}")" "${binaries[@]}"

# build RELEASE: the harness, the tags and the CRD that release needs.
build() {
  local release="$1" name src api tags=""
  name="$(minor "$release")"
  case "$name" in
    v1.15) src=v1.15 api=v2alpha1 ;;
    v1.18) src=v1.20 api=v2 tags=cilium_1_18 ;;
    v1.19 | v1.2[0-9]) src=v1.20 api=v2 ;;
    *)
      log "no harness for Cilium ${release} (tests/cilium-lbipam has 1.15, and 1.18 on)"
      exit 1
      ;;
  esac
  local dir="$work/$name" out="$bin_dir.tmp/$name"
  mkdir -p "$dir" "$out"
  cp "$harness/$src/"*.go "$dir/"
  cat >"$dir/go.mod" <<GOMOD
module canada-kaktus.invalid/cilium-lbipam

go 1.25.0

require github.com/cilium/cilium ${release}
GOMOD
  log "building Cilium ${release} LB IPAM (cilium.io/${api})"
  local t=$SECONDS
  (cd "$dir" && go build -trimpath -tags "$tags" -ldflags "-s -w" -o "$out/cilium-lbipam" .)
  log "built Cilium ${release} in $((SECONDS - t))s"
  # The program is built from the release named, not another the module
  # graph chose.
  if ! go version -m "$out/cilium-lbipam" | grep -q "github.com/cilium/cilium[[:space:]]*${release}\b"; then
    log "$out/cilium-lbipam was not built from Cilium ${release}:"
    go version -m "$out/cilium-lbipam" | grep 'github.com/cilium/cilium' >&2
    exit 1
  fi
  local module
  module="$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/cilium/cilium)"
  cp "$module/pkg/k8s/apis/cilium.io/client/crds/$api/ciliumloadbalancerippools.yaml" \
    "$out/ciliumloadbalancerippools.yaml"
  chmod u+w "$out/ciliumloadbalancerippools.yaml"
  printf '%s\n' "$release" >"$out/release"
  printf '%s\n' "$api" >"$out/api"
}

for release in "${releases[@]}"; do
  build "$release"
done
# The newest release of each API version answers for it, whatever the
# order of the releases (none for an API version no release built serves).
for api in v2 v2alpha1; do
  newest="$({ grep -lx "$api" "$bin_dir.tmp"/*/api || true; } | xargs -rn1 dirname | xargs -rn1 basename | sort -V | tail -n 1)"
  if [ -n "$newest" ]; then
    ln -s "$newest" "$bin_dir.tmp/$api"
  fi
done
cache_close "cilium ${releases[*]} lbipam built in $((SECONDS - start_time))s"
