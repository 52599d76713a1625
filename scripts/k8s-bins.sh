#!/usr/bin/env bash
# Builds (or reuses from a cache) the binaries of a real Kubernetes control
# plane for the end-to-end tests: kube-apiserver, kubectl and etcd.
#
# The last line on stdout is the directory holding them; everything else goes
# to stderr. Usage:
#
#   bin_dir="$(scripts/k8s-bins.sh | tail -n 1)"
#
# Everything is built from source with `go build` from the Go module proxy,
# so a fresh machine (CI) needs nothing but Go:
#
# * kube-apiserver and kubectl come from the k8s.io/kubernetes module. Its
#   go.mod points every k8s.io/<staging> module at ./staging/..., which only
#   works inside the kubernetes repository, so we build from a throwaway
#   module that requires k8s.io/kubernetes and replaces each staging module
#   with its published v0.<minor>.<patch> release. The replace list is
#   generated from the kubernetes go.mod itself.
# * etcd is built from go.etcd.io/etcd/server/v3 (its root package is the
#   etcd main) in a second throwaway module, so it keeps etcd's own pinned
#   dependencies. Kubernetes 1.35 to 1.37 are released and tested against
#   etcd 3.6. Debian bookworm's etcd-server package is 3.4, past its end of
#   life and not what they are tested with; building from Go also means no
#   apt step and no root is needed.
#
# Versions: the first argument, else the newest of K8S_VERSIONS in
# scripts/supported-versions.sh (the patches the Go module proxy serves and
# the checksum database verifies); etcd is ETCD_VERSION from there.
#
#   scripts/k8s-bins.sh v1.35.4
#
# Cache: ${CANADA_KAKTUS_CACHE_DIR:-$HOME/.cache/canada-kaktus}/k8s-<v>-etcd-<v>/bin
# The Go module and build caches (GOMODCACHE, GOCACHE) keep their defaults
# and speed up a rebuild too. A first build on 2 cores took 15 minutes
# (kube-apiserver ~11, kubectl ~1.5, etcd ~1.5, module downloads ~1); a cached
# run returns at once.
set -euo pipefail

# shellcheck source=scripts/supported-versions.sh
source "$(dirname "${BASH_SOURCE[0]}")/supported-versions.sh"
K8S_VERSION="${1:-${K8S_VERSIONS[0]}}"

log() { printf 'k8s-bins: %s\n' "$*" >&2; }


# shellcheck source=scripts/build-cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/build-cache.sh"
cache_open "k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}" kube-apiserver kubectl etcd

mkdir -p "$work/kubernetes" "$work/etcd"

# ---------------------------------------------------------------------------
# kube-apiserver and kubectl
# ---------------------------------------------------------------------------
log "downloading k8s.io/kubernetes@${K8S_VERSION}"
k8s_json="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}")"
json_field() { # json_field FIELD  (reads JSON on stdin; no jq needed)
  sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\{0,1\}\$/\\1/p" | head -n 1
}
k8s_gomod="$(json_field GoMod <<<"$k8s_json")"
if [[ -z "$k8s_gomod" || ! -f "$k8s_gomod" ]]; then
  log "could not download k8s.io/kubernetes@${K8S_VERSION}:"
  printf '%s\n' "$k8s_json" >&2
  exit 1
fi
k8s_list_json="$(go list -m -json "k8s.io/kubernetes@${K8S_VERSION}")"
# The commit is only known when the proxy reported the module's origin.
k8s_commit="$(json_field Hash <<<"$k8s_json")"
k8s_time="$(json_field Time <<<"$k8s_list_json")"
staging_version="v0.${K8S_VERSION#v1.}"

# Every "k8s.io/x => ./staging/src/k8s.io/x" becomes "k8s.io/x => k8s.io/x v0.y.z".
replaces="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*$#\1#p' "$k8s_gomod" |
  sort -u | sed "s#.*#\t& => & ${staging_version}#")"
if [[ -z "$replaces" ]]; then
  log "found no staging replace directives in $k8s_gomod"
  exit 1
fi
godebug="$(grep '^godebug' "$k8s_gomod" || true)"

cat >"$work/kubernetes/go.mod" <<EOF
module canada-kaktus.invalid/k8sbins

go 1.24.0

${godebug}

require k8s.io/kubernetes ${K8S_VERSION}

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kubectl
)

replace (
${replaces}
)
EOF

log "resolving the kubernetes module graph"
(cd "$work/kubernetes" && go mod tidy >&2)

# The same version variables hack/lib/version.sh sets, so `--version` and
# /version report the real release (clients compare it).
major="${K8S_VERSION#v}"
major="${major%%.*}"
minor="$(cut -d. -f2 <<<"${K8S_VERSION#v}")"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
  ldflags+=" -X ${pkg}.gitMajor=${major}"
  ldflags+=" -X ${pkg}.gitMinor=${minor}"
  if [[ -n "$k8s_commit" ]]; then
    ldflags+=" -X ${pkg}.gitCommit=${k8s_commit}"
  fi
  ldflags+=" -X ${pkg}.gitTreeState=clean"
  ldflags+=" -X ${pkg}.buildDate=${k8s_time}"
done

for cmd in kube-apiserver kubectl; do
  log "building ${cmd} ${K8S_VERSION} (this is the slow part)"
  t=$SECONDS
  (cd "$work/kubernetes" &&
    go build -trimpath -ldflags "$ldflags" -o "$bin_dir.tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  log "built ${cmd} in $((SECONDS - t))s"
done

# ---------------------------------------------------------------------------
# etcd
# ---------------------------------------------------------------------------
cat >"$work/etcd/go.mod" <<EOF
module canada-kaktus.invalid/etcdbins

go 1.24.0

require (
	go.etcd.io/etcd/api/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/client/pkg/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/client/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/pkg/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
)

tool go.etcd.io/etcd/server/v3
EOF

log "resolving the etcd module graph"
(cd "$work/etcd" && go mod tidy >&2)
log "building etcd ${ETCD_VERSION}"
t=$SECONDS
(cd "$work/etcd" &&
  go build -trimpath -ldflags "-s -w" -o "$bin_dir.tmp/etcd" go.etcd.io/etcd/server/v3)
log "built etcd in $((SECONDS - t))s"

# ---------------------------------------------------------------------------
"$bin_dir.tmp/kube-apiserver" --version >&2
"$bin_dir.tmp/kubectl" version --client >&2
"$bin_dir.tmp/etcd" --version >&2

cache_close "${K8S_VERSION} ${ETCD_VERSION} built in $((SECONDS - start_time))s"
