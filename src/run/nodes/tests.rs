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

/// Everything logged on this thread while `run` runs (a current-thread
/// runtime keeps the watch's task on it).
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

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
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let client = Client::try_from(config).unwrap();
    let (_changes, _view) = start(client);
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
