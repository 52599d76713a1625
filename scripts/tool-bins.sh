#!/usr/bin/env bash
# Builds (or reuses from a cache) the tools the test suite runs besides the
# control plane: helm (to lint, render and install the chart in
# deploy/helm/canada-kaktus) and actionlint (to lint .gitea/workflows).
#
# The last line on stdout is the directory holding them; everything else goes
# to stderr. Usage:
#
#   tool_dir="$(scripts/tool-bins.sh | tail -n 1)"
#
# Both are built with `go build` from the Go module proxy in a throwaway
# module (like scripts/k8s-bins.sh), so a fresh machine needs nothing but Go.
# Versions are pinned here and nowhere else; the cache key names them.
set -euo pipefail

HELM_VERSION="v3.22.0"
ACTIONLINT_VERSION="v1.7.12"
# Bumped when the way the tools are built changes, so a cached build made
# the old way is not reused.
RECIPE="2"

log() { printf 'tool-bins: %s\n' "$*" >&2; }


# shellcheck source=scripts/build-cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/build-cache.sh"
cache_open "tools-helm-${HELM_VERSION}-actionlint-${ACTIONLINT_VERSION}-r${RECIPE}" helm actionlint

mkdir -p "$work/helm" "$work/actionlint"

# helm: its version is stamped the way its own Makefile does.
cat >"$work/helm/go.mod" <<EOF
module canada-kaktus.invalid/helmbin

go 1.24.0

require helm.sh/helm/v3 ${HELM_VERSION}

tool helm.sh/helm/v3/cmd/helm
EOF
log "resolving helm ${HELM_VERSION}"
(cd "$work/helm" && go mod tidy >&2)
# As helm's Makefile does: the Kubernetes version `helm template` and
# `helm lint` assume (and check a chart's kubeVersion against) follows the
# client-go it is built with (v0.X.Y means 1.X).
client_go="$(cd "$work/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)"
k8s_minor="$(cut -d. -f2 <<<"${client_go#v}")"
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"
done
log "building helm ${HELM_VERSION} (client-go ${client_go}: Kubernetes 1.${k8s_minor})"
t=$SECONDS
(cd "$work/helm" &&
  go build -trimpath -ldflags "$helm_ldflags" -o "$bin_dir.tmp/helm" helm.sh/helm/v3/cmd/helm)
log "built helm in $((SECONDS - t))s"

cat >"$work/actionlint/go.mod" <<EOF
module canada-kaktus.invalid/actionlintbin

go 1.24.0

require github.com/rhysd/actionlint ${ACTIONLINT_VERSION}

tool github.com/rhysd/actionlint/cmd/actionlint
EOF
log "resolving actionlint ${ACTIONLINT_VERSION}"
(cd "$work/actionlint" && go mod tidy >&2)
log "building actionlint ${ACTIONLINT_VERSION}"
t=$SECONDS
(cd "$work/actionlint" &&
  go build -trimpath -ldflags "-s -w" -o "$bin_dir.tmp/actionlint" \
    github.com/rhysd/actionlint/cmd/actionlint)
log "built actionlint in $((SECONDS - t))s"

"$bin_dir.tmp/helm" version >&2
"$bin_dir.tmp/actionlint" -version >&2

cache_close "helm ${HELM_VERSION} actionlint ${ACTIONLINT_VERSION} built in $((SECONDS - start_time))s"
