//! The tier of outside programs: the controller as the ServiceAccount we
//! ship, with RBAC on, against a kube-apiserver and etcd that
//! `scripts/k8s-bins.sh` builds (`CANADA_KAKTUS_K8S_BIN_DIR`), and the Helm
//! chart with helm, kubectl and actionlint (`scripts/tool-bins.sh`). Every
//! test that needs one of them is `#[ignore]`d so that a plain `cargo test`
//! stays hermetic; `scripts/test` and `scripts/e2e.sh` run them
//! (`--include-ignored`).

#[path = "../support/mod.rs"]
mod support;

mod check;
mod cluster;
mod controller;
mod failover;
mod faults;
mod helm;
mod helm_schema;
mod manual_commands;
mod network_policy;
mod operate;
mod parts;
mod permissions;
mod pools;
mod robot;
mod stalls;
