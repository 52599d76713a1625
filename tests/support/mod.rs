//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cluster;
pub mod e2e;
pub mod fake_hetzner;
pub mod fake_kube;
