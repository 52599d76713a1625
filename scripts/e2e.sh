#!/usr/bin/env bash
# End-to-end tests against a real kube-apiserver + etcd (RBAC on).
#
# Builds the control-plane binaries on first use (scripts/k8s-bins.sh, cached
# afterwards), then runs the tests/e2e/ tier. Extra arguments go
# to the test binaries, e.g. `scripts/e2e.sh rbac` to filter by name.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin_dir="$(scripts/k8s-bins.sh | tail -n 1)"
export CANADA_KAKTUS_K8S_BIN_DIR="$bin_dir"
echo "e2e: using control-plane binaries from $CANADA_KAKTUS_K8S_BIN_DIR" >&2

# One test at a time: each starts its own kube-apiserver, and the machine has
# two cores.
exec cargo test --locked --test e2e -- --test-threads=1 --include-ignored "$@"
