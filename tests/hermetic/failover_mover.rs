//! The Floating IP mover against the fake Hetzner API, without a loop:
//! what it assigns for a given listing and Node view, and when it does not.

use crate::support;

use std::net::IpAddr;
use std::time::Duration;

use canada_kaktus::cluster::leases::{renew_time, SharedRenewals};
use canada_kaktus::config::{self, CiliumApiVersion, Failover};
use canada_kaktus::failover::Renewals;
use canada_kaktus::failover::{Candidate, FailoverPool, PoolFloatingIp};
use canada_kaktus::hetzner::HetznerClient;
use canada_kaktus::members::{NodeFacts, NodeView};
use canada_kaktus::pool::Fence;
use canada_kaktus::reconcile::{Clients, FailoverListing};
use canada_kaktus::run::failover::{Context, Mover};
use canada_kaktus::serve::metrics::Metrics;
use canada_kaktus::server::{Location, ServerStatus};
use std::sync::{Arc, Mutex};
use support::fake_hetzner::{ActionPlan, FakeFloatingIp, FakeHetzner, FakeServer, ReadOnly};
use support::fake_kube::FakeKube;
use support::in_process::{hcloud_env, quick_options};
use tokio::time::Instant;

const TOKEN: &str = "mover-token-77a1";

fn fsn1() -> Location {
    Location {
        name: "fsn1".into(),
        network_zone: "eu-central".into(),
    }
}

fn listing(holder: Option<i64>) -> FailoverListing {
    FailoverListing {
        started: Instant::now(),
        pools: vec![FailoverPool {
            pool: "edge".into(),
            selector: "kops.k8s.io/instance-role=Node".parse().unwrap(),
            node_selector: None,
            failover: Failover {
                after: Duration::from_secs(20),
                moves_per_minute: 10,
                holder_label: false,
            },
            candidates: (1..=3)
                .map(|id| Candidate {
                    id,
                    name: format!("node-{id}").into(),
                    status: ServerStatus::Running,
                    location: fsn1(),
                })
                .collect(),
            floating_ips: vec![PoolFloatingIp {
                id: 10,
                name: "fip-10".into(),
                address: "203.0.113.10".parse::<IpAddr>().unwrap(),
                holder,
                home: fsn1(),
            }],
            unheld: Vec::new(),
        }],
    }
}

fn nodes(deleting: &[i64]) -> NodeView {
    NodeView::new(
        (1..=3).map(|id| NodeFacts {
            name: format!("node-{id}"),
            server_id: Some(id),
            ready: true,
            deleting: deleting.contains(&id),
            ..NodeFacts::default()
        }),
        true,
    )
}

async fn setup() -> (FakeHetzner, Mover, config::Settings, Clients) {
    let (fake, _kube, mover, settings, clients) = setup_with(None).await;
    (fake, mover, settings, clients)
}

/// The fake Hetzner (servers 1 to 3, Floating IP 10 on server 1), the
/// in-memory Kubernetes API the moves read Leases and Nodes from, and a
/// mover reading `renewals`.
async fn setup_with(
    renewals: Option<SharedRenewals>,
) -> (FakeHetzner, FakeKube, Mover, config::Settings, Clients) {
    canada_kaktus::sync::install_crypto_provider();
    let fake = FakeHetzner::start().await;
    fake.set_servers((1..=3).map(|id| FakeServer::new(id, "192.0.2.1")).collect());
    fake.set_floating_ips(vec![FakeFloatingIp::new(10, "203.0.113.10", Some(1))]);
    support::isolate_working_directory();
    let settings = config::load(None, &hcloud_env(TOKEN, fake.endpoint())).unwrap();
    let client = HetznerClient::new(quick_options(fake.endpoint())).unwrap();
    let kube = FakeKube::new(&["v2"]);
    let clients = Clients::new(kube.client(), client, CiliumApiVersion::Auto);
    let mover = Mover::new(renewals);
    (fake, kube, mover, settings, clients)
}

/// What the loop would hand the mover: these clients and settings, at `now`.
fn look<'a>(
    clients: &'a Clients,
    settings: &'a config::Settings,
    metrics: &'a Metrics,
    now: Instant,
) -> Context<'a> {
    Context {
        clients,
        settings,
        metrics,
        now,
    }
}

/// The next move that ends; fails (instead of waiting for ever) when none
/// runs.
async fn ended(mover: &mut Mover) -> canada_kaktus::run::failover::Done {
    tokio::time::timeout(Duration::from_secs(30), mover.next_done())
        .await
        .expect("a move runs and ends")
        .expect("the move ends")
}

fn holder(fake: &FakeHetzner) -> Option<i64> {
    fake.floating_ip_servers()
        .into_iter()
        .find(|(id, _)| *id == 10)
        .and_then(|(_, server)| server)
}

#[tokio::test]
async fn an_ip_whose_move_runs_is_not_moved_again_until_the_move_ended() {
    let (fake, mut mover, settings, clients) = setup().await;
    fake.set_action_plan(ActionPlan {
        running_polls: 0,
        error: None,
        lasts: Duration::from_secs(2),
    });
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    // Server 1's Node is being deleted: the IP goes to 2 or 3.
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    let first = mover.holders()[0].moving_to.clone().expect("a move runs");
    let target: i64 = first.trim_start_matches("node-").parse().unwrap();
    // While its Action runs, the target's Node is marked for deletion too:
    // no second move of the same IP starts.
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1, target]),
    );
    assert_eq!(
        mover.holders()[0].moving_to.as_deref(),
        Some(first.as_str())
    );
    let done = mover.next_done().await.expect("the move ends");
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(holder(&fake), Some(target));
    assert!(
        published[0].1.note.contains(&format!("to {first}")),
        "{:?}",
        published
    );
    assert_eq!(fake.action_requests().0, 1, "one assignment so far");
    // Now the IP moves on from the target, to the one member left.
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1, target]),
    );
    let done = mover.next_done().await.expect("the second move ends");
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    let last = 6 - 1 - target;
    assert_eq!(holder(&fake), Some(last));
    assert_eq!(fake.action_requests().0, 2);
}

#[tokio::test]
async fn without_failover_pools_nothing_moves() {
    let (fake, mut mover, settings, clients) = setup().await;
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.set_listing(FailoverListing {
        started: Instant::now(),
        pools: Vec::new(),
    });
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    assert!(mover.holders().is_empty());
    assert_eq!(holder(&fake), Some(1));
    assert_eq!(fake.action_requests().0, 0);
}

#[tokio::test]
async fn a_holder_a_stale_node_view_shows_leaving_is_read_fresh_and_keeps_its_ip() {
    // The Node watch fell behind: it still shows node-1 being deleted, but
    // the API server has node-1 Ready and not leaving. Nothing is assigned.
    let (fake, kube, mut mover, settings, clients) = setup_with(None).await;
    kube.set_node("node-1", 1, true);
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    let done = mover.next_done().await.expect("the move ends");
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(fake.action_requests().0, 0, "nothing assigned");
    assert!(metrics.render().contains(
        r#"canada_kaktus_floating_ip_moves_total{pool="edge",reason="excluded",result="holder_back"} 1"#
    ));
    // The API server says NotReady now: after the backoff, it moves.
    kube.set_node("node-1", 1, false);
    mover.decide(
        &look(
            &clients,
            &settings,
            &metrics,
            Instant::now() + Duration::from_secs(6),
        ),
        &nodes(&[1]),
    );
    let done = mover.next_done().await.expect("the second move ends");
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert!(matches!(holder(&fake), Some(2 | 3)), "{:?}", holder(&fake));
}

#[tokio::test]
async fn a_read_only_token_fails_the_move_naming_the_token_setting_and_is_retried_later() {
    let (fake, mut mover, settings, clients) = setup().await;
    fake.fail_assignments(&[(
        401,
        "token_readonly",
        "token is only allowed to perform GET requests",
    )]);
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    let now = Instant::now();
    mover.decide(&look(&clients, &settings, &metrics, now), &nodes(&[1]));
    let done = mover.next_done().await.expect("the move ends");
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    let (pool, event) = &published[0];
    assert_eq!(
        (pool.as_str(), event.reason),
        ("edge", "FloatingIpMoveFailed")
    );
    assert!(event.note.contains("HcloudToken"), "{}", event.note);
    assert!(!event.note.contains(TOKEN));
    assert_eq!(holder(&fake), Some(1), "nothing moved");
    assert!(metrics.render().contains(
        r#"canada_kaktus_floating_ip_moves_total{pool="edge",reason="excluded",result="failure"} 1"#
    ));
    // Not again at once: the retry waits (5 s, then longer).
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    assert_eq!(mover.holders()[0].moving_to, None);
    assert!(mover
        .wake_at()
        .is_some_and(|at| at >= now + Duration::from_secs(4)));
    assert_eq!(fake.action_requests().0, 1);
}

/// A `403 forbidden` on the assignment (hcloud-go's code for a read-only
/// token since 2026-10-05): the move fails naming write permission and the
/// token setting, never "may not list servers" (the cause
/// `token_readonly` in the log: `e2e::failover`).
#[tokio::test]
async fn a_403_forbidden_assignment_fails_the_move_as_a_read_only_token() {
    let (fake, mut mover, settings, clients) = setup().await;
    fake.set_read_only_answer(ReadOnly::Forbidden403);
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    let done = mover.next_done().await.expect("the move ends");
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    let (_, event) = &published[0];
    assert_eq!(event.reason, "FloatingIpMoveFailed");
    assert!(
        event.note.contains("may only read (403 forbidden)") && event.note.contains("HcloudToken"),
        "{}",
        event.note
    );
    assert!(!event.note.contains("list servers"), "{}", event.note);
    assert!(!event.note.contains(TOKEN));
    assert_eq!(holder(&fake), Some(1), "nothing moved");
}

/// `422 floating_ip_assigned` says the IP is assigned, not to which
/// server: the move is done only when a read shows it on the target.
/// Here it is still on the old holder: a failed move, retried later, and
/// the listing keeps the holder Hetzner shows.
#[tokio::test]
async fn a_422_floating_ip_assigned_elsewhere_is_a_failed_move() {
    let (fake, mut mover, settings, clients) = setup().await;
    fake.fail_assignments(&[(
        422,
        "floating_ip_assigned",
        "floating ip is already assigned",
    )]);
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    let done = mover.next_done().await.expect("the move ends");
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(published.len(), 1, "{published:?}");
    let (_, event) = &published[0];
    assert_eq!(event.reason, "FloatingIpMoveFailed", "{}", event.note);
    assert!(event.note.contains("node-1"), "{}", event.note);
    assert_eq!(holder(&fake), Some(1), "nothing moved");
    assert_eq!(mover.holders()[0].holder.as_deref(), Some("node-1"));
    assert!(metrics.render().contains(
        r#"canada_kaktus_floating_ip_moves_total{pool="edge",reason="excluded",result="failure"} 1"#
    ));
}

/// Another tool put the IP on the target between the fresh read and the
/// assignment: the read after the `422` shows it there, and it is moved.
#[tokio::test]
async fn a_422_floating_ip_assigned_on_the_target_is_a_move() {
    let (fake, mut mover, settings, clients) = setup().await;
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    // node-1 and node-3 are being deleted: node-2 is the target, and
    // another tool puts the IP there just before the assignment.
    fake.overtake_next_assignment(2);
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1, 3]),
    );
    let done = ended(&mut mover).await;
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(fake.action_requests().0, 1, "one assignment, answered 422");
    assert_eq!(
        fake.holder_requests(),
        2,
        "the IP read before the assignment, and again after the 422"
    );
    assert_eq!(fake.actions_started(), 0, "no Action ran");
    let (_, event) = &published[0];
    assert_eq!(event.reason, "FloatingIpMoved", "{}", event.note);
    assert_eq!(holder(&fake), Some(2));
    assert_eq!(mover.holders()[0].holder.as_deref(), Some("node-2"));
}

/// Hetzner assigns a Floating IP only within its network zone. An
/// assignment Hetzner refuses (`400`/`422` with a code that is no passing
/// state) is not sent to that server again for 5 minutes, or until a
/// listing that began after it: the next member is asked at once, and
/// without one the IP is reported stranded, instead of the same refused
/// move failing again and again.
#[tokio::test]
async fn a_refused_assignment_skips_that_server_for_a_while() {
    let (fake, mut mover, settings, clients) = setup().await;
    fake.fail_assignments(&[
        (422, "invalid_input", "server is in another network zone"),
        (422, "invalid_input", "server is in another network zone"),
    ]);
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    // node-1 (the holder) and node-3 are being deleted: node-2 is the one
    // member, and Hetzner refuses it.
    let deleting = nodes(&[1, 3]);
    let now = Instant::now();
    mover.decide(&look(&clients, &settings, &metrics, now), &deleting);
    let done = ended(&mut mover).await;
    let published = mover.finish(&look(&clients, &settings, &metrics, now), done);
    assert_eq!(published[0].1.reason, "FloatingIpMoveFailed");
    let note = &published[0].1.note;
    assert!(
        note.contains("422 invalid_input") && note.contains("node-2"),
        "{note}"
    );
    // At once, no backoff: node-2 is not asked again, the IP is stranded.
    let published = mover.decide(&look(&clients, &settings, &metrics, now), &deleting);
    assert_eq!(fake.action_requests().0, 1, "node-2 is not asked again");
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].1.reason, "FloatingIpStranded");
    assert!(metrics
        .render()
        .contains(r#"canada_kaktus_floating_ips_stranded{pool="edge"} 1"#));
    // Five minutes on, node-2 is asked again (and refuses again).
    let later = now + Duration::from_secs(301);
    mover.decide(&look(&clients, &settings, &metrics, later), &deleting);
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, later), done);
    assert_eq!(fake.action_requests().0, 2);
    // A listing that began after the refusal forgets it: node-2 is asked
    // again and takes the IP.
    mover.set_listing(FailoverListing {
        started: later + Duration::from_secs(1),
        ..listing(Some(1))
    });
    let after = later + Duration::from_secs(2);
    mover.decide(&look(&clients, &settings, &metrics, after), &deleting);
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, after), done);
    assert_eq!(fake.action_requests().0, 3);
    assert_eq!(holder(&fake), Some(2));
}

/// A listing that began before the refusal does not forget it.
#[tokio::test]
async fn a_listing_older_than_a_refusal_keeps_it() {
    let (fake, mut mover, settings, clients) = setup().await;
    fake.fail_assignments(&[(422, "invalid_input", "no")]);
    let metrics = Metrics::new();
    let old = listing(Some(1));
    mover.set_listing(old.clone());
    let deleting = nodes(&[1, 3]);
    let now = Instant::now();
    mover.decide(&look(&clients, &settings, &metrics, now), &deleting);
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, now), done);
    mover.set_listing(old);
    let published = mover.decide(&look(&clients, &settings, &metrics, now), &deleting);
    assert_eq!(published[0].1.reason, "FloatingIpStranded", "{published:?}");
    assert_eq!(fake.action_requests().0, 1);
}

/// Issue 44, item 5: the token file sits on a volume that never answers
/// (here a FIFO nobody writes): the move ends after its read limit as a
/// failed move, instead of keeping the IP "moving" for the rest of the term.
#[tokio::test]
async fn a_token_file_that_never_answers_ends_the_move_in_time() {
    let (fake, mut mover, mut settings, clients) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("token");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    settings.token = config::TokenSource::File(fifo.clone());
    // The blocked read ends once someone writes (so the runtime can stop,
    // also when an assertion below fails).
    struct Unblock(std::path::PathBuf);
    impl Drop for Unblock {
        fn drop(&mut self) {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(&self.0)
                .and_then(|mut f| std::io::Write::write_all(&mut f, TOKEN.as_bytes()));
        }
    }
    let _unblock = Unblock(fifo.clone());
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    let done = ended(&mut mover).await;
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    let (_, event) = &published[0];
    assert_eq!(event.reason, "FloatingIpMoveFailed");
    assert!(
        event
            .note
            .contains("reading the Hetzner API token took longer than 10s"),
        "{}",
        event.note
    );
    assert_eq!(mover.holders()[0].moving_to, None);
    assert_eq!(fake.action_requests().0, 0, "nothing sent");
}

/// Issue 44, item 6 (N8): the replica lost the Lease and won it back while
/// a move of the old term was on its way: the fence, open again for the
/// new term, holds that move back (its holder read may predate another
/// replica's move).
#[tokio::test]
async fn a_move_of_an_old_term_sends_nothing_once_the_fence_opens_for_a_new_one() {
    let (fake, kube, _mover, settings, _) = setup_with(None).await;
    let fence = Fence::closed();
    fence.set_term(1);
    fence.allow_until(Some(std::time::SystemTime::now() + Duration::from_secs(60)));
    let client = HetznerClient::new(quick_options(fake.endpoint())).unwrap();
    let clients = Clients::new(kube.client(), client, CiliumApiVersion::Auto).fenced(fence.clone());
    let mut mover = Mover::new(None);
    mover.set_term(1);
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1]),
    );
    // Before the task runs: term 2 began and the fence opened for it.
    fence.set_term(2);
    let done = ended(&mut mover).await;
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(published[0].1.reason, "FloatingIpMoveFailed");
    assert!(
        published[0].1.note.contains("leader Lease"),
        "{}",
        published[0].1.note
    );
    assert_eq!(fake.action_requests().0, 0, "nothing assigned");
}

/// Issue 44, item 6 (N7): a reset (a reload that turned failover off, a new
/// term) takes the stranded gauge along; it is set again by the next look.
#[tokio::test]
async fn a_reset_takes_the_stranded_gauge_along() {
    let (_fake, mut mover, settings, clients) = setup().await;
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1, 2, 3]),
    );
    let stranded = r#"canada_kaktus_floating_ips_stranded{pool="edge"}"#;
    assert!(metrics.render().contains(&format!("{stranded} 1")));
    mover.reset(&metrics);
    assert!(!metrics.render().contains(stranded), "{}", metrics.render());
}

#[tokio::test]
async fn an_unassigned_ip_is_assigned_and_one_without_a_member_is_reported_once() {
    let (fake, mut mover, settings, clients) = setup().await;
    fake.set_floating_ips(vec![FakeFloatingIp::new(10, "203.0.113.10", None)]);
    let metrics = Metrics::new();
    // Every Node is being deleted: nowhere to go. Said once, not per look.
    mover.set_listing(listing(None));
    let first = mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1, 2, 3]),
    );
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].1.reason, "FloatingIpStranded");
    assert!(
        first[0].1.note.contains("203.0.113.10"),
        "{}",
        first[0].1.note
    );
    let again = mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1, 2, 3]),
    );
    assert!(again.is_empty(), "{again:?}");
    assert!(metrics
        .render()
        .contains(r#"canada_kaktus_floating_ips_stranded{pool="edge"} 1"#));
    assert!(mover.wake_at().is_some(), "looked at again while stranded");
    assert_eq!(fake.action_requests().0, 0);
    // A member is back: the IP is assigned.
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[1, 3]),
    );
    let done = mover.next_done().await.expect("the move ends");
    let published = mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(holder(&fake), Some(2));
    assert!(
        published[0]
            .1
            .note
            .contains("from no server to node-2 (it was unassigned)"),
        "{}",
        published[0].1.note
    );
    assert!(metrics.render().contains(
        r#"canada_kaktus_floating_ip_moves_total{pool="edge",reason="unassigned",result="success"} 1"#
    ));
}

/// A Lease `renewTime` as the watch and the fresh read both give it.
fn renewed(at: &str) -> String {
    let lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-1"}, "spec": {"renewTime": at}
    }))
    .unwrap();
    renew_time(&lease).unwrap()
}

#[tokio::test]
async fn a_silent_holder_is_read_fresh_and_one_that_renewed_keeps_its_ip() {
    // The watch saw node-1's Lease last renewed 30 s ago (FailoverAfter
    // 20 s): silent. But the Lease as the API server has it now was renewed
    // since (the watch was stuck): nothing is assigned.
    let past = Instant::now().checked_sub(Duration::from_secs(30)).unwrap();
    let mut seen = Renewals::default();
    seen.set_current_at(true, past);
    seen.saw("node-1", Some(renewed("2026-11-25T03:00:00.000000Z")), past);
    for node in ["node-2", "node-3"] {
        seen.saw(
            node,
            Some(renewed("2026-11-25T03:00:29.000000Z")),
            Instant::now(),
        );
    }
    let shared: SharedRenewals = Arc::new(Mutex::new(seen));
    let (fake, kube, mut mover, settings, clients) = setup_with(Some(shared.clone())).await;
    kube.set_lease("node-1", "2026-11-25T03:00:30.000000Z");
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[]),
    );
    assert!(
        mover.holders()[0].moving_to.is_some(),
        "the view says silent"
    );
    let done = mover.next_done().await.expect("the move ends");
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(fake.action_requests().0, 0, "nothing assigned");
    assert_eq!(holder(&fake), Some(1));
    assert!(metrics.render().contains(
        r#"canada_kaktus_floating_ip_moves_total{pool="edge",reason="silent",result="holder_back"} 1"#
    ));
    // The watch stays stuck, node-1 renews no more: the renewal the fresh
    // read found restarted its clock, so 20 s later it is silent again and
    // the IP moves (the others renewed meanwhile).
    let later = Instant::now() + Duration::from_secs(21);
    for node in ["node-2", "node-3"] {
        shared
            .lock()
            .unwrap()
            .saw(node, Some(renewed("2026-11-25T03:00:50.000000Z")), later);
    }
    mover.decide(&look(&clients, &settings, &metrics, later), &nodes(&[]));
    let done = mover.next_done().await.expect("the second move ends");
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert!(matches!(holder(&fake), Some(2 | 3)), "{:?}", holder(&fake));
}

/// Renewals as a current Lease watch saw them at `now`: per Node, its
/// `renewTime` and how many seconds before `now` the watch saw it.
fn seen_ago(now: Instant, seen: &[(&str, &str, u64)]) -> SharedRenewals {
    let at = |ago: u64| now.checked_sub(Duration::from_secs(ago)).unwrap();
    let mut renewals = Renewals::default();
    renewals.set_current_at(true, at(60));
    for (node, renew_time, ago) in seen {
        renewals.saw(node, Some(renewed(renew_time)), at(*ago));
    }
    Arc::new(Mutex::new(renewals))
}

/// The Renewals of a Lease watch that stalled 30 s ago without an error
/// (every Node's last renewal seen then), node-1 the holder.
fn stalled_watch() -> SharedRenewals {
    let past = Instant::now().checked_sub(Duration::from_secs(30)).unwrap();
    let mut seen = Renewals::default();
    seen.set_current_at(true, past);
    for node in ["node-1", "node-2", "node-3"] {
        seen.saw(node, Some(renewed("2026-11-25T03:00:00.000000Z")), past);
    }
    Arc::new(Mutex::new(seen))
}

/// Issue 44, item 3: the Lease watch stalled without an error, so every
/// Node looks late (and the holder silent). The holder really stopped;
/// the target really renews: the move reads the target's Lease fresh,
/// finds the renewal and moves (0148c81 stranded the IP until the watch
/// came back, about 295 s).
#[tokio::test]
async fn a_stalled_lease_watch_strands_no_ip_a_fresh_read_finds_the_target_renewing() {
    let shared = stalled_watch();
    let (fake, kube, mut mover, settings, clients) = setup_with(Some(shared.clone())).await;
    // The holder's Lease is as the watch saw it; node-2's was renewed since.
    kube.set_lease("node-1", "2026-11-25T03:00:00.000000Z");
    kube.set_lease("node-2", "2026-11-25T03:00:29.000000Z");
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    // node-3 is being deleted: node-2 is the one target.
    let published = mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[3]),
    );
    assert!(published.is_empty(), "nothing stranded: {published:?}");
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(holder(&fake), Some(2));
    // The renewal the read found restarted node-2's clock.
    let clock = shared
        .lock()
        .unwrap()
        .renew_time("node-2")
        .map(str::to_owned);
    assert_eq!(
        clock,
        Some(renewed("2026-11-25T03:00:29.000000Z")),
        "the renewal the read found"
    );
}

/// The target is late and a fresh read finds no renewal either (a location
/// failing): nothing is sent to Hetzner, the IP is stranded, and the
/// target is asked again once the watch sees it renew.
#[tokio::test]
async fn a_late_target_whose_lease_is_not_renewed_takes_nothing() {
    let shared = stalled_watch();
    let (fake, kube, mut mover, settings, clients) = setup_with(Some(shared.clone())).await;
    kube.set_lease("node-1", "2026-11-25T03:00:00.000000Z");
    kube.set_lease("node-2", "2026-11-25T03:00:00.000000Z");
    let metrics = Metrics::new();
    mover.set_listing(listing(Some(1)));
    let now = Instant::now();
    mover.decide(&look(&clients, &settings, &metrics, now), &nodes(&[3]));
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, now), done);
    assert_eq!(fake.holder_requests(), 0, "no Hetzner request");
    assert_eq!(fake.action_requests().0, 0);
    assert!(metrics.render().contains(
        r#"canada_kaktus_floating_ip_moves_total{pool="edge",reason="silent",result="target_late"} 1"#
    ));
    let published = mover.decide(&look(&clients, &settings, &metrics, now), &nodes(&[3]));
    assert_eq!(published[0].1.reason, "FloatingIpStranded", "{published:?}");
    assert_eq!(mover.holders()[0].moving_to, None);
    // The watch sees node-2 renew: it is a target again at once.
    let later = now + Duration::from_secs(1);
    let renewal = Some(renewed("2026-11-25T03:00:40.000000Z"));
    shared.lock().unwrap().saw("node-2", renewal, later);
    mover.decide(&look(&clients, &settings, &metrics, later), &nodes(&[3]));
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, later), done);
    assert_eq!(holder(&fake), Some(2));
}

/// After the outside read: with FailoverAfter 15 s a target must have
/// renewed within 5 s, but a live kubelet renews every 10 s, so a healthy
/// target often looks late. Its Lease, unchanged at the first read, is
/// read again when its next renewal is due, and it takes the IP.
#[tokio::test]
async fn a_live_target_that_only_looks_late_is_read_again_when_its_renewal_is_due() {
    let now = Instant::now();
    let seen = seen_ago(
        now,
        &[
            ("node-1", "2026-11-25T03:00:00.000000Z", 16),
            ("node-2", "2026-11-25T03:00:09.000000Z", 7),
        ],
    );
    let (fake, kube, mut mover, settings, clients) = setup_with(Some(seen)).await;
    kube.set_lease("node-1", "2026-11-25T03:00:00.000000Z");
    kube.set_lease("node-2", "2026-11-25T03:00:09.000000Z");
    let mut quick = listing(Some(1));
    quick.pools[0].failover.after = Duration::from_secs(15);
    mover.set_listing(quick);
    let metrics = Metrics::new();
    // node-3 is being deleted: node-2 is the one target.
    mover.decide(&look(&clients, &settings, &metrics, now), &nodes(&[3]));
    // The kubelet renews a second after the first read.
    let renewing = kube.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        renewing.set_lease("node-2", "2026-11-25T03:00:19.000000Z");
    });
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(holder(&fake), Some(2));
}

/// Old finding 3: a whole location fails at once. The holder node-1 fell
/// silent (FailoverAfter 20 s); node-2, at home, renewed 12 s ago, just
/// before it died with it; node-3, in another location, renewed 2 s ago.
/// A target must have renewed within FailoverAfter less a kubelet period
/// (10 s): node-2 is late and ranks last, so the IP goes to node-3 in one
/// move (0148c81 took node-2 first: one useless hop).
#[tokio::test]
async fn a_target_that_died_with_the_holder_is_not_chosen() {
    let now = Instant::now();
    let seen = seen_ago(
        now,
        &[
            ("node-1", "2026-11-25T03:00:00.000000Z", 21),
            ("node-2", "2026-11-25T03:00:09.000000Z", 12),
            ("node-3", "2026-11-25T03:00:19.000000Z", 2),
        ],
    );
    let (fake, _kube, mut mover, settings, clients) = setup_with(Some(seen)).await;
    let mut spread = listing(Some(1));
    spread.pools[0].candidates[2].location = Location {
        name: "nbg1".into(),
        network_zone: "eu-central".into(),
    };
    mover.set_listing(spread);
    let metrics = Metrics::new();
    mover.decide(&look(&clients, &settings, &metrics, now), &nodes(&[]));
    let done = ended(&mut mover).await;
    mover.finish(&look(&clients, &settings, &metrics, now), done);
    assert_eq!(holder(&fake), Some(3));
    assert_eq!(fake.action_requests().0, 1, "one move");
}

#[tokio::test]
async fn a_holder_a_listing_missed_is_read_fresh_and_keeps_its_ip_while_it_runs() {
    // Offset paging hid server 1 from the listing: gone, by the listing.
    // Hetzner says it runs: nothing is assigned.
    let (fake, _kube, mut mover, settings, clients) = setup_with(None).await;
    let metrics = Metrics::new();
    let mut missed = listing(Some(1));
    missed.pools[0].candidates.retain(|c| c.id != 1);
    mover.set_listing(missed);
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[]),
    );
    let done = mover.next_done().await.expect("the move ends");
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert_eq!(fake.server_requests(), 1);
    assert_eq!(fake.action_requests().0, 0, "nothing assigned");
    assert_eq!(holder(&fake), Some(1));
}

#[tokio::test]
async fn a_holder_the_pool_no_longer_selects_gives_its_ip_up_though_it_runs() {
    // Server 1 runs but lost the pool's label: not a member, so its IP goes.
    let (fake, _kube, mut mover, settings, clients) = setup_with(None).await;
    fake.set_servers(vec![
        FakeServer::new(1, "192.0.2.1").with_label("kops.k8s.io/instance-role", "Master"),
        FakeServer::new(2, "192.0.2.2"),
        FakeServer::new(3, "192.0.2.3"),
    ]);
    let metrics = Metrics::new();
    let mut relabelled = listing(Some(1));
    relabelled.pools[0].candidates.retain(|c| c.id != 1);
    mover.set_listing(relabelled);
    mover.decide(
        &look(&clients, &settings, &metrics, Instant::now()),
        &nodes(&[]),
    );
    let done = mover.next_done().await.expect("the move ends");
    mover.finish(&look(&clients, &settings, &metrics, Instant::now()), done);
    assert!(matches!(holder(&fake), Some(2 | 3)), "{:?}", holder(&fake));
}
