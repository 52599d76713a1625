#!/usr/bin/env bash
# Builds (or reuses from a cache) tests/cilium-lbipam: Cilium's LB IPAM
# allocator (github.com/cilium/cilium/operator/pkg/lbipam) as a program of
# its own, so the end-to-end tests can show that a LoadBalancer Service
# really gets an address from the pool canada-kaktus writes.
#
# The last line on stdout is the directory holding `cilium-lbipam`.
#
# Pinned to one Cilium release. The Go proxy serves v1.15.6, v1.15.19 and
# v1.20.2 of the module; the whole cilium-operator does not build from it
# (some of its dependencies are not served), the lbipam package does. The
# module graph cannot be tidied for the same reason, so the build resolves
# only what the program imports (-mod=mod, checksums verified as usual).
set -euo pipefail

CILIUM_VERSION="v1.20.2"

log() { printf 'cilium-bins: %s\n' "$*" >&2; }


src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/cilium-lbipam" && pwd)/main.go"
# The source is part of the key: a changed harness is built again.
src_hash="$(sha256sum "$src" | cut -c1-12)"

# shellcheck source=scripts/build-cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/build-cache.sh"
cache_open "cilium-lbipam-${CILIUM_VERSION}-${src_hash}" cilium-lbipam

cp "$src" "$work/main.go"
cat >"$work/go.mod" <<GOMOD
module canada-kaktus.invalid/cilium-lbipam

go 1.25.0

require github.com/cilium/cilium ${CILIUM_VERSION}
GOMOD
log "building Cilium ${CILIUM_VERSION} LB IPAM"
(cd "$work" && go build -trimpath -ldflags "-s -w" -o "$bin_dir.tmp/cilium-lbipam" .)
cache_close "cilium ${CILIUM_VERSION} lbipam built in $((SECONDS - start_time))s"
