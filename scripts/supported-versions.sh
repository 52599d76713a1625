# Sourced by scripts/test, scripts/k8s-bins.sh and scripts/cilium-bins.sh:
# the versions canada-kaktus supports, each one run by scripts/test. The
# README's table of supported versions names the same ones
# (tests/hermetic/manual.rs holds the two together).

# Kubernetes: the three newest minors, newest first. The whole real API
# server suite runs on the first; the smoke set (SMOKE_TESTS in
# scripts/test) on the others.
K8S_VERSIONS=("v1.37.2" "v1.36.3" "v1.35.4")
# The etcd every Kubernetes above is released and tested with.
ETCD_VERSION="v3.6.16"

# Cilium: the allocator scenarios run on each. 1.15 is the one release kept
# with cilium.io/v2alpha1 pools only; from 1.18 on the pools are
# cilium.io/v2.
CILIUM_RELEASES=("v1.20.2" "v1.19.7" "v1.18.6" "v1.15.19")
