//! The Cilium tier: claims about what Cilium does, proven with Cilium's own
//! LB IPAM (built by `scripts/cilium-bins.sh` from every supported release,
//! `CANADA_KAKTUS_CILIUM_BIN_DIR`) on a real kube-apiserver: the allocator
//! scenarios, Floating IP failover, and the randomized soak of the write
//! gate. `#[ignore]`d like the real API server tier.

#[path = "../support/mod.rs"]
mod support;

mod allocator;
mod demo;
mod egress;
mod failover;
mod soak;
