//! The hermetic tier: every test that needs nothing outside this process
//! but fakes (a fake Hetzner, Robot and Kubernetes on loopback) and the
//! built binary. One test binary, so `tests/support/` is compiled and linked
//! once for all of them; `cargo test` runs it with no download and no tool.
//! The few tests here that need an outside tool (promtool, or the hrobot-go
//! sample documents) are `#[ignore]`d and say which; `scripts/test`
//! provides them and runs those too.

#[path = "../support/mod.rs"]
mod support;

mod architecture;
mod bounds;
mod claims;
mod cli;
mod config;
mod controller;
mod docs;
mod failover_mover;
mod faults;
mod hetzner;
mod hetzner_actions;
mod install;
mod manual;
mod monitoring;
mod pools;
mod port;
mod properties;
mod reconcile;
mod release;
mod robot;
mod workflows;
