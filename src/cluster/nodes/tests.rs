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

fn writer(keys: &[&str]) -> NodeWriter {
    NodeWriter::new(NodeStore::default(), LabelKeys::named(keys.iter().copied()))
}

fn ready(mut node: Node, ready: bool) -> Node {
    let status = node.status.get_or_insert_with(Default::default);
    status.conditions = Some(vec![k8s_openapi::api::core::v1::NodeCondition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        ..Default::default()
    }]);
    node
}

fn labelled(mut node: Node, labels: &[(&str, &str)]) -> Node {
    node.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    node
}

#[test]
fn only_additions_removals_and_address_changes_count() {
    let mut writer = writer(&[]);
    let mut fold = |e| writer.apply_watcher_event(e);
    assert_eq!(fold(Event::Init), None);
    assert_eq!(fold(Event::InitApply(node("a", &["192.0.2.1"]))), None);
    assert_eq!(
        fold(Event::InitDone).map(|c| c.kind.as_str()),
        Some("listed for the first time"),
        "the first list: additions may be decided from now on"
    );
    assert_eq!(
        fold(Event::Apply(node("a", &["192.0.2.1"]))),
        None,
        "a status update"
    );
    assert_eq!(
        fold(Event::Apply(node("b", &["192.0.2.2"]))).map(|c| c.kind.as_str()),
        Some("added")
    );
    assert_eq!(
        fold(Event::Apply(node("b", &["192.0.2.3"]))).map(|c| c.kind.as_str()),
        Some("addresses changed")
    );
    assert_eq!(
        fold(Event::Delete(node("a", &[]))).map(|c| c.kind.as_str()),
        Some("removed")
    );
    assert_eq!(fold(Event::Delete(node("a", &[]))), None, "already gone");
    // A relist after a reconnect that finds a difference counts once.
    assert_eq!(fold(Event::Init), None);
    assert_eq!(fold(Event::InitApply(node("b", &["192.0.2.3"]))), None);
    assert_eq!(fold(Event::InitApply(node("c", &["192.0.2.4"]))), None);
    assert_eq!(fold(Event::InitDone).map(|c| c.node), Some("c".to_owned()));
    let view = writer.store.read();
    assert!(view.complete);
    let names: Vec<&str> = view.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names.len(), 2);
    assert!(view.named("b").is_some() && view.named("c").is_some());
}

#[test]
fn a_change_of_labels_alone_is_its_own_kind_of_change() {
    let mut writer = writer(&["role"]);
    let mut fold = |e| writer.apply_watcher_event(e);
    fold(Event::Init);
    fold(Event::InitApply(node("a", &["192.0.2.1"])));
    fold(Event::InitDone);
    let edge = labelled(node("a", &["192.0.2.1"]), &[("role", "edge")]);
    assert_eq!(
        fold(Event::Apply(edge)).map(|c| c.kind.as_str()),
        Some(NodeChangeKind::LabelsChanged.as_str()),
        "only a pool with a NodeSelector cares"
    );
    // The exclude label is a node rule's: a change of state.
    let out = labelled(
        node("a", &["192.0.2.1"]),
        &[("role", "edge"), (crate::members::EXCLUDE_LABEL, "")],
    );
    assert_eq!(
        fold(Event::Apply(out)).map(|c| c.kind.as_str()),
        Some("state changed")
    );
}

/// The view keeps only the labels a selector names: a Node's other labels
/// are not kept, and a change of one of them writes nothing and wakes
/// nothing (issue 35).
#[test]
fn a_label_no_selector_names_is_not_kept_and_its_change_wakes_nothing() {
    let mut writer = writer(&["role"]);
    let many: Vec<(String, String)> = (0..12)
        .map(|i| (format!("example.com/label-{i}"), format!("value-{i}")))
        .collect();
    let mut labels: Vec<(&str, &str)> =
        many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    labels.push(("role", "edge"));
    writer.apply_watcher_event(Event::Init);
    writer.apply_watcher_event(Event::InitApply(labelled(
        node("a", &["192.0.2.1"]),
        &labels,
    )));
    writer.apply_watcher_event(Event::InitDone);
    let kept = writer.store.read().named("a").unwrap().labels.clone();
    assert_eq!(kept, [("role".to_owned(), "edge".to_owned())].into());

    labels[0].1 = "another value";
    let changed = labelled(node("a", &["192.0.2.1"]), &labels);
    assert_eq!(writer.apply_watcher_event(Event::Apply(changed)), None);

    // Without any selector on Node labels, none is kept.
    let mut bare = self::writer(&[]);
    bare.apply_watcher_event(Event::Init);
    bare.apply_watcher_event(Event::InitApply(labelled(
        node("a", &["192.0.2.1"]),
        &labels,
    )));
    bare.apply_watcher_event(Event::InitDone);
    assert!(bare.store.read().named("a").unwrap().labels.is_empty());
}

/// A Node change writes its own entry of the view and copies no other
/// Node's (issue 35): with 1,000 Nodes, a hundred changes of every kind
/// the rules read copy no entry at all. (The Node task used to rebuild
/// the whole view after every change: 1,000 copies each.)
#[test]
fn a_node_change_copies_no_entry_of_the_view() {
    let mut writer = writer(&["role"]);
    writer.apply_watcher_event(Event::Init);
    for i in 0..1000 {
        let node = ready(
            node(
                &format!("n{i}"),
                &[&format!("10.0.{}.{}", i / 250, i % 250)],
            ),
            true,
        );
        writer.apply_watcher_event(Event::InitApply(node));
    }
    writer.apply_watcher_event(Event::InitDone);
    let before = crate::members::entries_copied();
    let mut changes = 0;
    for i in 0..100 {
        let name = format!("n{}", i * 7);
        let ip = format!("10.0.{}.{}", (i * 7) / 250, (i * 7) % 250);
        let base = node(&name, &[&ip]);
        let event = match i % 3 {
            0 => ready(base, false),
            1 => ready(labelled(base, &[("role", "edge")]), true),
            _ => ready(node(&name, &[&ip, "192.0.2.99"]), true),
        };
        changes += usize::from(writer.apply_watcher_event(Event::Apply(event)).is_some());
    }
    assert_eq!(changes, 100, "every one was a change the rules read");
    assert_eq!(
        crate::members::entries_copied() - before,
        0,
        "a Node change copied entries of the view"
    );
    assert_eq!(writer.store.read().len(), 1000);
}

/// Everything logged on this thread while `run` runs (a current-thread
/// runtime keeps the watch's task on it).
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::sync::lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&crate::sync::lock(&self.0)).into_owned()
    }
}

/// An API server that never answers (nothing listens on loopback port 1):
/// the watch fails again and again, and never says it works again (kube's
/// watcher announces each relist with `Init` before it asks anything).
#[tokio::test]
async fn an_unreachable_api_server_is_never_said_to_work_again() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Another test may have hit the watch's log lines first with no
    // subscriber on its thread; tracing cached "never" for them then.
    tracing::callsite::rebuild_interest_cache();
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let client = Client::try_from(config).unwrap();
    let (_changes, _view, _listed) = start(client, LabelKeys::default());
    let attempts = |text: &str| {
        text.matches("watching Nodes failed").count()
            + text.matches("watching Nodes still fails").count()
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while attempts(&captured.text()) < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            captured.text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let text = captured.text();
    assert_eq!(text.matches("works again").count(), 0, "{text}");
    assert_eq!(
        text.matches("watching Nodes failed").count(),
        1,
        "one warning per streak: {text}"
    );
}
