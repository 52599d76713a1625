use super::*;
use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
use kube::api::ObjectMeta;

fn node(name: &str, ips: &[&str]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            addresses: Some(
                ips.iter()
                    .map(|ip| NodeAddress {
                        type_: "ExternalIP".into(),
                        address: (*ip).into(),
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn only_additions_removals_and_address_changes_count() {
    let (mut known, mut relist, mut init) = (Known::new(), None, false);
    let mut fold = |e| fold(e, &mut known, &mut relist, &mut init);
    assert_eq!(fold(Event::Init), None);
    assert_eq!(fold(Event::InitApply(node("a", &["192.0.2.1"]))), None);
    assert_eq!(
        fold(Event::InitDone).map(|c| c.what),
        Some("listed for the first time"),
        "the first list: additions may be decided from now on"
    );
    assert_eq!(
        fold(Event::Apply(node("a", &["192.0.2.1"]))),
        None,
        "a status update"
    );
    assert_eq!(
        fold(Event::Apply(node("b", &["192.0.2.2"]))).map(|c| c.what),
        Some("added")
    );
    assert_eq!(
        fold(Event::Apply(node("b", &["192.0.2.3"]))).map(|c| c.what),
        Some("addresses changed")
    );
    assert_eq!(
        fold(Event::Delete(node("a", &[]))).map(|c| c.what),
        Some("removed")
    );
    assert_eq!(fold(Event::Delete(node("a", &[]))), None, "already gone");
    // A relist after a reconnect that finds a difference counts once.
    assert_eq!(fold(Event::Init), None);
    assert_eq!(fold(Event::InitApply(node("b", &["192.0.2.3"]))), None);
    assert_eq!(fold(Event::InitApply(node("c", &["192.0.2.4"]))), None);
    assert_eq!(fold(Event::InitDone).map(|c| c.node), Some("c".to_owned()));
}

#[test]
fn a_change_of_labels_alone_is_its_own_kind_of_change() {
    let (mut known, mut relist, mut init) = (Known::new(), None, false);
    let mut fold = |e| fold(e, &mut known, &mut relist, &mut init);
    fold(Event::Init);
    fold(Event::InitApply(node("a", &["192.0.2.1"])));
    fold(Event::InitDone);
    let mut labelled = node("a", &["192.0.2.1"]);
    labelled.metadata.labels = Some([("role".to_owned(), "edge".to_owned())].into());
    assert_eq!(
        fold(Event::Apply(labelled.clone())).map(|c| c.what),
        Some(LABELS_CHANGED),
        "only a pool with a NodeSelector cares"
    );
    // The exclude label is a node rule's: a change of state.
    labelled.metadata.labels =
        Some([(crate::members::EXCLUDE_LABEL.to_owned(), String::new())].into());
    assert_eq!(
        fold(Event::Apply(labelled)).map(|c| c.what),
        Some("state changed")
    );
}
