use super::*;
use crate::pool::object::PoolSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The apply body as JSON: what the API server receives.
fn manifest(pool: &DesiredPool, api_version: &str) -> Value {
    serde_json::to_value(pool.apply_body(api_version)).unwrap()
}

fn template() -> PoolTemplate {
    PoolTemplate {
        name: "covidnetes-pool".into(),
        ..Default::default()
    }
}

fn applied(desired: &DesiredPool) -> Pool {
    Pool::applied(desired)
}

#[test]
fn render_deduplicates_and_sorts_numerically() {
    let pool = render(
        &template(),
        [
            ip("10.0.0.10"),
            ip("10.0.0.9"),
            ip("10.0.0.10"),
            ip("9.255.255.255"),
        ],
    );
    assert_eq!(
        pool.addresses,
        vec![ip("9.255.255.255"), ip("10.0.0.9"), ip("10.0.0.10")]
    );
    assert_eq!(
        manifest(&pool, "cilium.io/v2")["spec"]["blocks"],
        json!([
            {"cidr": "9.255.255.255/32"},
            {"cidr": "10.0.0.9/32"},
            {"cidr": "10.0.0.10/32"},
        ])
    );
}

#[test]
fn render_gives_the_same_bytes_for_the_same_servers_in_any_order() {
    let a = manifest(
        &render(&template(), [ip("1.2.3.4"), ip("5.6.7.8")]),
        "cilium.io/v2",
    );
    let b = manifest(
        &render(&template(), [ip("5.6.7.8"), ip("1.2.3.4")]),
        "cilium.io/v2",
    );
    assert_eq!(
        serde_json::to_vec(&a).unwrap(),
        serde_json::to_vec(&b).unwrap()
    );
}

#[test]
fn manifest_holds_only_owned_fields_with_managed_by_and_configured_metadata() {
    let mut t = template();
    t.annotations
        .insert("argocd.argoproj.io/tracking-id".into(), "x".into());
    t.labels.insert("team".into(), "net".into());
    let manifest = manifest(&render(&t, [ip("192.168.1.100")]), "cilium.io/v2alpha1");
    assert_eq!(
        manifest,
        json!({
            "apiVersion": "cilium.io/v2alpha1",
            "kind": "CiliumLoadBalancerIPPool",
            "metadata": {
                "name": "covidnetes-pool",
                "annotations": {"argocd.argoproj.io/tracking-id": "x", "managed-by": "canada-kaktus"},
                "labels": {"team": "net"},
            },
            "spec": {"blocks": [{"cidr": "192.168.1.100/32"}], "disabled": false},
        })
    );
}

#[test]
fn blocks_match_agrees_with_comparing_json() {
    let desired = render(&template(), [ip("1.1.1.1"), ip("2.2.2.2")]);
    let wanted = manifest(&desired, "cilium.io/v2")["spec"]["blocks"].clone();
    for live in [
        None,
        Some(json!(null)),
        Some(json!([])),
        Some(json!({"cidr": "1.1.1.1/32"})),
        Some(json!([{"cidr": "1.1.1.1/32"}])),
        Some(json!([{"cidr": "1.1.1.1/32"}, {"cidr": "2.2.2.2/32"}])),
        Some(json!([{"cidr": "2.2.2.2/32"}, {"cidr": "1.1.1.1/32"}])),
        Some(json!([{"cidr": "1.1.1.1/32"}, {"cidr": "2.2.2.2/32", "start": "2.2.2.2"}])),
        Some(json!([{"cidr": "1.1.1.1/32"}, {"start": "2.2.2.2"}])),
        Some(json!([{"cidr": "1.1.1.1/32"}, "2.2.2.2/32"])),
    ] {
        let expected = live.as_ref() == Some(&wanted);
        // A shape the typed pool cannot hold (the CRD rejects it too) never
        // matches.
        let read = match &live {
            None => Ok(PoolSpec::default()),
            Some(blocks) => serde_json::from_value::<PoolSpec>(json!({ "blocks": blocks })),
        };
        let matched = read.is_ok_and(|spec| blocks_match(&spec.blocks, &desired.addresses));
        assert_eq!(matched, expected, "{live:?}");
    }
}

#[test]
fn managed_by_cannot_be_overridden_by_configuration() {
    let mut t = template();
    t.annotations
        .insert(MANAGED_BY_KEY.into(), "someone-else".into());
    let pool = render(&t, [ip("1.1.1.1")]);
    assert_eq!(pool.annotations[MANAGED_BY_KEY], MANAGED_BY_VALUE);
}

#[test]
fn manifest_carries_the_service_selector() {
    let mut t = template();
    t.service_selector = Some(KubeLabelSelector {
        match_labels: Some(BTreeMap::from([("color".to_owned(), "blue".to_owned())])),
        match_expressions: None,
    });
    let manifest = manifest(&render(&t, [ip("1.1.1.1")]), "cilium.io/v2");
    assert_eq!(
        manifest["spec"]["serviceSelector"],
        json!({"matchLabels": {"color": "blue"}})
    );
}

#[test]
fn diff_names_added_removed_and_foreign_blocks() {
    let live = Pool::from_json(
        ObjectMeta::default(),
        json!({"spec": {"blocks": [
            {"cidr": "1.1.1.1/32"},
            {"cidr": "2.2.2.2/32"},
            {"start": "3.3.3.3"},
            {"start": "4.4.4.4", "stop": "4.4.4.4"},
            {"cidr": "10.0.0.0/24"},
            {"start": "5.5.5.1", "stop": "5.5.5.9"},
            {"cidr": "2001:db8::/64"},
        ]}}),
    );
    let live = live_addresses(&live);
    assert_eq!(live.foreign_blocks, 3);
    // A range or a wider CIDR gives every address in it, within the cap
    // on all of them; past it (the /64) the pool is not written at all.
    assert_eq!(live.addresses.len(), 4 + 256 + 9);
    let desired = render(
        &template(),
        [ip("2.2.2.2"), ip("3.3.3.3"), ip("5.5.5.5"), ip("6.6.6.6")],
    );
    let d = diff(Some(&live), &desired);
    assert_eq!(d.added, vec![ip("6.6.6.6")]);
    let mut removed = vec![ip("1.1.1.1"), ip("4.4.4.4")];
    removed.extend(
        (1..=9)
            .filter(|n| *n != 5)
            .map(|n| ip(&format!("5.5.5.{n}"))),
    );
    removed.extend((0..=255).map(|n| ip(&format!("10.0.0.{n}"))));
    removed.sort();
    assert_eq!(d.removed, removed);
    assert_eq!(d.foreign_blocks_removed, 3);
    assert!(!d.is_empty());
}

#[test]
fn diff_against_a_missing_pool_adds_everything() {
    let desired = render(&template(), [ip("2.2.2.2")]);
    let d = diff(None, &desired);
    assert_eq!(d.added, vec![ip("2.2.2.2")]);
    assert!(d.removed.is_empty());
}

#[test]
fn no_write_when_the_live_pool_matches() {
    let desired = render(&template(), [ip("1.1.1.1"), ip("2.2.2.2")]);
    assert_eq!(write_reason(Some(&applied(&desired)), &desired), None);
}

#[test]
fn missing_pool_is_written() {
    let desired = render(&template(), [ip("1.1.1.1")]);
    assert_eq!(write_reason(None, &desired), Some(WriteReason::Missing));
}

#[test]
fn edited_or_reordered_blocks_are_written() {
    let desired = render(&template(), [ip("1.1.1.1"), ip("2.2.2.2")]);
    let mut live = applied(&desired);
    live.edit(|d| d["spec"]["blocks"] = json!([{"cidr": "2.2.2.2/32"}, {"cidr": "1.1.1.1/32"}]));
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::BlocksDiffer)
    );
    live.edit(|d| d["spec"]["blocks"] = json!([{"cidr": "1.1.1.1/32"}]));
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::BlocksDiffer)
    );
}

#[test]
fn a_disabled_pool_is_written() {
    let desired = render(&template(), [ip("1.1.1.1")]);
    let mut live = applied(&desired);
    live.edit(|d| d["spec"]["disabled"] = json!(true));
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::Disabled)
    );
}

#[test]
fn foreign_metadata_and_status_do_not_cause_a_write() {
    let desired = render(&template(), [ip("1.1.1.1")]);
    let mut live = applied(&desired);
    live.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("argocd.argoproj.io/tracking-id".into(), "app:x".into());
    live.metadata.labels = Some(BTreeMap::from([("owner".into(), "argocd".into())]));
    live.edit(|d| {
        d["status"] = json!({"conditions": [{"type": "cilium.io/IPsTotal", "status": "Unknown"}]})
    });
    assert_eq!(write_reason(Some(&live), &desired), None);
}

#[test]
fn a_changed_annotation_value_is_written() {
    let mut t = template();
    t.annotations.insert("team".into(), "a".into());
    let desired = render(&t, [ip("1.1.1.1")]);
    let mut live = applied(&desired);
    live.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("team".into(), "b".into());
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::MetadataDiffers)
    );
}

#[test]
fn a_pool_never_applied_by_us_is_adopted_once() {
    let desired = render(&template(), [ip("1.1.1.1")]);
    let mut live = applied(&desired);
    live.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("canada-kaktus-go".into()),
        operation: Some("Update".into()),
        ..Default::default()
    }]);
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::NotOwned)
    );
}

#[test]
fn an_annotation_we_applied_but_no_longer_want_is_removed_by_a_write() {
    let mut before = template();
    before.annotations.insert("old".into(), "x".into());
    let live = applied(&render(&before, [ip("1.1.1.1")]));
    let desired = render(&template(), [ip("1.1.1.1")]);
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::StaleOwnedField)
    );
}

#[test]
fn a_service_selector_we_applied_but_no_longer_want_is_removed_by_a_write() {
    let mut before = template();
    before.service_selector = Some(KubeLabelSelector::default());
    let live = applied(&render(&before, [ip("1.1.1.1")]));
    let desired = render(&template(), [ip("1.1.1.1")]);
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::StaleOwnedField)
    );
}

#[test]
fn a_changed_service_selector_is_written() {
    let mut t = template();
    t.service_selector = Some(KubeLabelSelector {
        match_labels: Some(BTreeMap::from([("a".into(), "b".into())])),
        match_expressions: None,
    });
    let desired = render(&t, [ip("1.1.1.1")]);
    let mut live = applied(&desired);
    live.edit(|d| d["spec"]["serviceSelector"] = json!({"matchLabels": {"a": "c"}}));
    assert_eq!(
        write_reason(Some(&live), &desired),
        Some(WriteReason::ServiceSelectorDiffers)
    );
}

#[test]
fn pool_conflict_is_read_only_when_true() {
    let mut live = applied(&render(&template(), [ip("1.1.1.1")]));
    live.edit(|d| {
        d["status"] = json!({"conditions": [
            {"type": "cilium.io/PoolConflict", "status": "False", "reason": "", "message": ""},
        ]})
    });
    assert_eq!(pool_conflict(&live), None);
    live.edit(|d| {
        d["status"]["conditions"][0] = json!({
            "type": "cilium.io/PoolConflict", "status": "True",
            "reason": "cidr_overlap", "message": "Pool overlaps with CIDR of other-pool"
        })
    });
    assert_eq!(
        pool_conflict(&live),
        Some(PoolConflict {
            reason: "cidr_overlap".into(),
            message: "Pool overlaps with CIDR of other-pool".into()
        })
    );
}
