//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod agents;
pub mod cilium;
pub mod cluster;
pub mod e2e;
pub mod examples;
pub mod failover;
pub mod fake_hetzner;
pub mod fake_kube;
pub mod fake_robot;
pub mod in_process;
pub mod logs;
pub mod monitoring;
pub mod nodes;
pub mod openapi;
pub mod relay;
pub mod soak;

/// A list of the versions the project supports and the test command runs:
/// the bash array `name` of scripts/supported-versions.sh
/// (`K8S_VERSIONS=("v1.37.2" …)`).
pub fn supported_versions(name: &str) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/supported-versions.sh");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}=(")))
        .unwrap_or_else(|| panic!("scripts/supported-versions.sh sets {name}"));
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

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
