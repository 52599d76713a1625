#!/usr/bin/env bash
# Builds (or reuses from a cache) Prometheus' promtool, which the test suite
# runs on the monitoring shipped in deploy/monitoring: `promtool check rules`
# parses every alert (and every dashboard query) with Prometheus' own PromQL
# parser, and `promtool test rules` runs the alerts' unit tests
# (tests/fixtures/monitoring/alerts_test.yaml).
#
# The last line on stdout is the directory holding it; everything else goes
# to stderr. Usage:
#
#   promtool_dir="$(scripts/promtool-bins.sh | tail -n 1)"
#
# Built with `go build` from the Go module proxy in a throwaway module, like
# scripts/tool-bins.sh; its own cache key, so that a new version of one tool
# does not rebuild the others. Prometheus' Go module v0.X.Y is release 3.X.Y
# (the module path has no /v3).
set -euo pipefail

PROMETHEUS_MODULE_VERSION="v0.316.0"
# Bumped when the way it is built changes.
RECIPE="1"

log() { printf 'promtool-bins: %s\n' "$*" >&2; }

# shellcheck source=scripts/build-cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/build-cache.sh"
cache_open "promtool-${PROMETHEUS_MODULE_VERSION}-r${RECIPE}" promtool

release="3.${PROMETHEUS_MODULE_VERSION#v0.3}"
cat >"$work/go.mod" <<EOF2
module canada-kaktus.invalid/promtoolbin

go 1.25.0

require github.com/prometheus/prometheus ${PROMETHEUS_MODULE_VERSION}

tool github.com/prometheus/prometheus/cmd/promtool
EOF2
log "resolving prometheus ${PROMETHEUS_MODULE_VERSION} (release ${release})"
(cd "$work" && go mod tidy >&2)
log "building promtool ${release}"
t=$SECONDS
(cd "$work" &&
  go build -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${release}" \
    -o "$bin_dir.tmp/promtool" github.com/prometheus/prometheus/cmd/promtool)
log "built promtool in $((SECONDS - t))s"

"$bin_dir.tmp/promtool" --version >&2

cache_close "promtool ${release} built in $((SECONDS - start_time))s"
