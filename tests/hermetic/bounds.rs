//! Calls to the Kubernetes API outside the loop's cycle limit have bounds
//! of their own (issue 44, item 5): the client sets no read timeout (it
//! would cut quiet watches), so a connection that goes dark without an
//! error must not stop the election or the Events for ever. The fake API
//! leaves chosen requests unanswered; tokio's clock is paused, so the
//! bounds pass in no time.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use canada_kaktus::cluster::events::{self, EventSink, Target};
use canada_kaktus::config;
use canada_kaktus::pool::pool_resource;
use canada_kaktus::run::parts::Leadership;
use canada_kaktus::serve::metrics::Metrics;
use support::fake_kube::FakeKube;
use support::in_process::hcloud_env;

const TOKEN: &str = "bounds-token-0c1d";
/// Far longer than any bound: a wait that reaches it failed.
const GIVE_UP: Duration = Duration::from_secs(600);

/// The pool `edge`, its API known: each Event first reads the pool's uid.
fn target() -> Target {
    Target {
        name: "edge".into(),
        resource: Some(pool_resource("v2")),
    }
}

/// Waits (on the paused clock) until `check` holds; fails past [`GIVE_UP`].
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let waited = tokio::time::timeout(GIVE_UP, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: not within {GIVE_UP:?}");
}

/// The Event publisher on `kube`, counting into `metrics`.
fn sink(kube: &FakeKube, metrics: &Arc<Metrics>) -> EventSink {
    let health = Arc::new(canada_kaktus::serve::health::Health::new(
        Duration::from_secs(60),
    ));
    EventSink::start(kube.client(), "me".into(), metrics.clone(), health)
}

#[tokio::test(start_paused = true)]
async fn an_event_that_gets_no_answer_holds_up_no_later_event() {
    let kube = FakeKube::new(&["v2"]);
    kube.hang_requests("/events", 1);
    let metrics = Arc::new(Metrics::new());
    let sink = sink(&kube, &metrics);
    sink.publish(target(), vec![events::leader_elected("first-replica")]);
    // The uid read of the next batch gets no answer either.
    eventually("the first Event was sent", || kube.hangs_left() == 0).await;
    kube.hang_requests("/ciliumloadbalancerippools/edge", 1);
    sink.publish(target(), vec![events::leader_elected("second-replica")]);
    eventually("the second Event is published", || {
        kube.events()
            .iter()
            .any(|e| e.to_string().contains("second-replica"))
    })
    .await;
    let text = metrics.render();
    assert!(
        text.contains(r#"canada_kaktus_kube_events_total{result="failure"} 1"#)
            && text.contains(r#"canada_kaktus_kube_events_total{result="success"} 1"#),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn events_that_find_the_queue_full_are_counted_as_dropped() {
    let kube = FakeKube::new(&["v2"]);
    kube.hang_requests("/events", 1000);
    let metrics = Arc::new(Metrics::new());
    let sink = sink(&kube, &metrics);
    for n in 0..100 {
        sink.publish(target(), vec![events::leader_elected(&format!("r-{n}"))]);
    }
    let dropped = metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(r#"canada_kaktus_kube_events_total{result="dropped"} "#))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(dropped.is_some_and(|n| n >= 30), "{dropped:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_gets_no_answer_is_reported_and_tried_again() {
    let kube = FakeKube::new(&["v2"]);
    kube.hang_requests("/leases/canada-kaktus", 1);
    let mut env: HashMap<String, String> = hcloud_env(TOKEN, "http://127.0.0.1:9/v1".into());
    env.extend([
        ("CANADA_KAKTUS_LEADER_ELECTION".into(), "true".into()),
        ("POD_NAME".into(), "replica-a".into()),
        ("POD_NAMESPACE".into(), "canada-kaktus".into()),
    ]);
    let settings = config::load(None, &env).unwrap();
    let fence = Leadership::fence_for(&settings, &env);
    let mut leadership = Leadership::start(&kube.client(), &settings, &env, fence);
    let problem = tokio::time::timeout(GIVE_UP, async {
        loop {
            leadership.problem.changed().await.unwrap();
            if let Some(problem) = leadership.problem.borrow_and_update().clone() {
                return problem;
            }
        }
    })
    .await
    .expect("the election reports the Lease it gets no answer for");
    assert!(
        problem.contains("canada-kaktus/canada-kaktus")
            && problem.contains("no answer from the API server within 10s"),
        "{problem}"
    );
    leadership.stop().await;
}
