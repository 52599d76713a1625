use super::*;
use crate::pool::{render, PoolTemplate, FIELD_MANAGER};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::json;

fn desired() -> DesiredPool {
    render(
        &PoolTemplate {
            name: "p".into(),
            ..Default::default()
        },
        ["1.1.1.1".parse::<IpAddr>().unwrap()],
    )
}

fn live_matching(desired: &DesiredPool) -> Pool {
    Pool::from_json(
        ObjectMeta {
            name: Some("p".into()),
            annotations: Some(desired.annotations.clone()),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some(FIELD_MANAGER.into()),
                operation: Some("Apply".into()),
                fields_v1: Some(FieldsV1(json!({
                    "f:metadata": {"f:annotations": {"f:managed-by": {}}},
                    "f:spec": {"f:blocks": {}, "f:disabled": {}}
                }))),
                ..Default::default()
            }]),
            ..Default::default()
        },
        json!({"spec": serde_json::to_value(desired.apply_body("cilium.io/v2")).unwrap()["spec"]}),
    )
}

#[test]
fn our_own_write_seen_by_the_watch_needs_no_repair() {
    let d = desired();
    assert!(!event_needs_repair(Some(&live_matching(&d)), &d, false));
}

#[test]
fn a_status_only_change_by_cilium_needs_no_repair() {
    let d = desired();
    let mut live = live_matching(&d);
    live.edit(|d| {
        d["status"] = json!({"conditions": [{"type": "cilium.io/IPsUsed", "status": "True"}]})
    });
    assert!(!event_needs_repair(Some(&live), &d, false));
}

#[test]
fn an_edit_or_a_delete_needs_a_repair() {
    let d = desired();
    let mut live = live_matching(&d);
    live.edit(|d| d["spec"]["blocks"] = json!([]));
    assert!(event_needs_repair(Some(&live), &d, false));
    assert!(event_needs_repair(None, &d, false));
}

#[test]
fn a_new_or_cleared_conflict_is_reported() {
    let d = desired();
    let mut live = live_matching(&d);
    live.edit(|d| {
        d["status"] = json!({"conditions": [
            {"type": "cilium.io/PoolConflict", "status": "True", "reason": "cidr_overlap", "message": "m"}
        ]})
    });
    assert!(event_needs_repair(Some(&live), &d, false));
    assert!(!event_needs_repair(Some(&live), &d, true));
    assert!(event_needs_repair(Some(&live_matching(&d)), &d, true));
}

#[test]
fn a_repair_writes_the_last_write_less_what_the_latest_plan_no_longer_wants() {
    let render = |addresses: &[&str]| {
        crate::pool::render(
            &crate::pool::PoolTemplate {
                name: "a".to_owned(),
                ..Default::default()
            },
            addresses.iter().map(|a| a.parse::<IpAddr>().unwrap()),
        )
    };
    let mut state = PoolState {
        last_desired: Some(render(&["192.0.2.1", "192.0.2.2"])),
        ..PoolState::default()
    };
    // No plan of this term yet: the last write.
    assert_eq!(state.repairable(), state.last_desired.clone());
    state.planned = Some(render(&["192.0.2.2", "192.0.2.3"]));
    assert_eq!(state.repairable(), Some(render(&["192.0.2.2"])));
    // Two pools swapped servers: nothing of the last write is wanted.
    state.planned = Some(render(&["192.0.2.3"]));
    assert_eq!(state.repairable(), None);
    state.last_desired = None;
    assert_eq!(state.repairable(), None);
}
