#!/usr/bin/env bash
# Builds (or reuses from a cache) tests/cilium-lbipam: Cilium's LB IPAM
# allocator (github.com/cilium/cilium/operator/pkg/lbipam) as a program of
# its own, so the end-to-end tests can show that a LoadBalancer Service
# really gets an address from the pool canada-kaktus writes.
#
# Two Cilium releases, one per pool API version canada-kaktus writes:
#   <bin dir>/v2/        Cilium 1.18+ behaviour (cilium.io/v2 pools)
#   <bin dir>/v2alpha1/  Cilium 1.15-1.17 behaviour (cilium.io/v2alpha1 only)
# each with `cilium-lbipam`, the CiliumLoadBalancerIPPool CRD that release
# ships (`ciliumloadbalancerippools.yaml`, copied from the module) and
# `release` (the Cilium version). The last line on stdout is <bin dir>.
#
# The releases are pinned here and only here. The Go proxy serves v1.15.6,
# v1.15.19 and v1.20.2 of the module; the whole cilium-operator does not
# build from it (some of its dependencies are not served), the lbipam
# package does. The module graph cannot be tidied for the same reason, so
# the build resolves only what the program imports (-mod=mod, checksums
# verified as usual).
set -euo pipefail

# API version -> Cilium release, and the harness directory for it.
CILIUM_V2_RELEASE="v1.20.2"
CILIUM_V2ALPHA1_RELEASE="v1.15.19"

log() { printf 'cilium-bins: %s\n' "$*" >&2; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
harness="$(cd "$here/../tests/cilium-lbipam" && pwd)"
# The harness sources and this script are part of the key: a change to
# either is built again.
src_hash="$(cat "$harness/v1.20/main.go" "$harness/v1.15/main.go" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"

# shellcheck source=scripts/build-cache.sh
source "$here/build-cache.sh"
cache_open "cilium-lbipam-${CILIUM_V2_RELEASE}-${CILIUM_V2ALPHA1_RELEASE}-${src_hash}" \
  v2/cilium-lbipam v2alpha1/cilium-lbipam

# build API_VERSION RELEASE HARNESS_DIR CRD_DIR
build() {
  local api="$1" release="$2" src="$3" crd_dir="$4"
  local dir="$work/$api" out="$bin_dir.tmp/$api"
  mkdir -p "$dir" "$out"
  cp "$harness/$src/main.go" "$dir/main.go"
  cat >"$dir/go.mod" <<GOMOD
module canada-kaktus.invalid/cilium-lbipam

go 1.25.0

require github.com/cilium/cilium ${release}
GOMOD
  log "building Cilium ${release} LB IPAM (cilium.io/${api})"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$out/cilium-lbipam" .)
  local module
  module="$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/cilium/cilium)"
  cp "$module/pkg/k8s/apis/cilium.io/client/crds/$crd_dir/ciliumloadbalancerippools.yaml" \
    "$out/ciliumloadbalancerippools.yaml"
  chmod u+w "$out/ciliumloadbalancerippools.yaml"
  printf '%s\n' "$release" >"$out/release"
}

build v2 "$CILIUM_V2_RELEASE" v1.20 v2
build v2alpha1 "$CILIUM_V2ALPHA1_RELEASE" v1.15 v2alpha1
cache_close "cilium ${CILIUM_V2_RELEASE} and ${CILIUM_V2ALPHA1_RELEASE} lbipam built in $((SECONDS - start_time))s"
