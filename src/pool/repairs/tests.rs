use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::json;

#[test]
fn a_few_repairs_go_through_at_once_then_each_waits_twice_as_long() {
    let start = Instant::now();
    let mut limiter = RepairLimiter::default();
    let mut now = start;
    for _ in 0..FREE_REPAIRS {
        assert_eq!(limiter.earliest(now), None);
        limiter.record(now);
        now += Duration::from_secs(1);
    }
    let mut waits = Vec::new();
    for _ in 0..8 {
        let at = limiter.earliest(now).expect("the fight goes on: back off");
        waits.push(at.saturating_duration_since(now).as_secs());
        // The other writer changes the pool again at once; the repair
        // runs when it is allowed.
        now = at;
        limiter.record(now);
        now += Duration::from_secs(1);
    }
    assert_eq!(waits, vec![9, 19, 39, 79, 159, 299, 299, 299]);
}

#[test]
fn a_quiet_window_ends_the_fight() {
    let start = Instant::now();
    let mut limiter = RepairLimiter::default();
    for n in 0..5 {
        let now = start + Duration::from_secs(n);
        let at = limiter.earliest(now).unwrap_or(now);
        limiter.record(at);
    }
    assert!(limiter.earliest(start + Duration::from_secs(6)).is_some());
    let later = start + Duration::from_secs(3600);
    assert_eq!(
        limiter.earliest(later),
        None,
        "an hour later: repair at once"
    );
    limiter.record(later);
    assert_eq!(limiter.earliest(later + Duration::from_secs(1)), None);
}

#[test]
fn other_writers_of_the_spec_are_named() {
    let entry = |manager: &str, fields: serde_json::Value| ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Update".into()),
        fields_v1: Some(FieldsV1(fields)),
        ..Default::default()
    };
    let mut live = Pool::from_json(Default::default(), json!({}));
    live.metadata.managed_fields = Some(vec![
        entry(FIELD_MANAGER, json!({"f:spec": {"f:blocks": {}}})),
        entry("argocd-controller", json!({"f:spec": {"f:blocks": {}}})),
        entry("kubectl-label", json!({"f:metadata": {"f:labels": {}}})),
        entry("argocd-controller", json!({"f:spec": {"f:disabled": {}}})),
        entry("cilium-operator", json!({"f:status": {}})),
    ]);
    assert_eq!(other_spec_writers(&live), vec!["argocd-controller"]);
}
