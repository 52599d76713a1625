//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cilium;
pub mod cluster;
pub mod e2e;
pub mod fake_hetzner;
pub mod fake_kube;
pub mod fake_robot;
pub mod in_process;
pub mod logs;
pub mod nodes;
pub mod openapi;
pub mod relay;
pub mod soak;

/// Moves this test binary once into an empty temporary directory, so that
/// no `./config.json` in the crate root (or anywhere the tests are started)
/// can change a test's configuration. Files the tests write live under
/// absolute temporary paths.
pub fn isolate_working_directory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        std::env::set_current_dir(dir).expect("chdir");
    });
}

/// The outcome of a one-pool cycle as one result: the only pool's, or the
/// first failed one's.
pub fn single(
    outcomes: Result<
        Vec<canada_kaktus::reconcile::PoolOutcome>,
        canada_kaktus::reconcile::ReconcileError,
    >,
) -> Result<canada_kaktus::reconcile::CycleReport, canada_kaktus::reconcile::ReconcileError> {
    let mut outcomes = outcomes?;
    match outcomes.iter().position(|o| o.result.is_err()) {
        Some(failed) => outcomes.remove(failed).result,
        None => outcomes.remove(0).result,
    }
}
