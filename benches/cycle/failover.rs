//! Floating IP failover time (issue 22): three servers with Ready Nodes
//! whose kubelets renew their Leases every 10 s (as kubelets do), a
//! failover pool with
//! `FailoverAfter: 15s` (the least allowed) and Hetzner Actions that take
//! [`ACTION`]. The holder's kubelet stops renewing (a crashed node); the
//! benchmark measures from its last renewal to the controller starting the
//! move, and to the controller seeing the Action succeed, next to the
//! physical floor: the grace (`FailoverAfter`) plus the Action. The pool
//! must hold the Floating IP at the end (its history is the end-to-end
//! suites' business), and the IP must be on another server.

use super::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use support::fake_hetzner::{numbered_servers, ActionPlan, FakeFloatingIp, Fault};
use support::nodes::{holder_of, Kubelets};

pub(super) const POOL: &str = "bench-fip";
const FIP: &str = "203.0.113.200";
const AFTER: Duration = Duration::from_secs(15);
/// The simulated time Hetzner takes to switch the IP.
const ACTION: Duration = Duration::from_secs(2);
/// How often the kubelets renew their Leases (the kubelet's default).
const RENEW: Duration = Duration::from_secs(10);

pub(super) struct FailoverResult {
    /// Last renewal → the move started (the controller saw the silence).
    pub(super) detected: Duration,
    /// Last renewal → the controller saw the Action succeed.
    pub(super) failover: Duration,
}

impl FailoverResult {
    pub(super) fn floor() -> Duration {
        AFTER + ACTION
    }
}

/// [`failover_time`] with a listing of [`SLOW_LISTING`] in flight when the
/// holder falls silent (issue 34: a move never waits for a listing).
pub(super) const SLOW_LISTING: Duration = Duration::from_secs(48);

/// Failover time with the loop idle (`slow_listing` `None`: an hour
/// between listings), or with every listing taking `slow_listing` and one
/// in flight when the holder falls silent.
pub(super) async fn failover_time(
    bench: &SizeBench<'_>,
    slow_listing: Option<Duration>,
) -> FailoverResult {
    let servers: Vec<_> = numbered_servers(3);
    bench.hetzner.set_servers(servers);
    bench.hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(900, FIP, Some(1)).with_label("pool", "bench")
    ]);
    bench.hetzner.set_action_plan(ActionPlan {
        running_polls: 0,
        error: None,
        lasts: ACTION,
    });
    let nodes: Api<Node> = Api::all(bench.cluster.admin_client());
    let kubelets = Kubelets::start(bench.cluster, &nodes, 1..=3, RENEW).await;
    let pools = json!([{
        "Name": POOL, "LabelSelector": "kops.k8s.io/instance-role=Node",
        "Addresses": ["floating-ip"], "FloatingIpSelector": "pool=bench",
        "FloatingIpFailover": true, "FailoverAfter": format!("{}s", AFTER.as_secs()),
    }]);
    // Debug: the Lease watch says when it listed.
    let (interval, timeout) = match slow_listing {
        None => ("1h", "10s"),
        // Listings every 2 s, each allowed its full time.
        Some(_) => ("2s", "60s"),
    };
    let mut proc = bench.spawn_pools(
        interval,
        &pools,
        &[
            ("CANADA_KAKTUS_LOGLEVEL", "debug"),
            ("CANADA_KAKTUS_HCLOUD_TIMEOUT", timeout),
        ],
    );
    proc.wait_message("watching the Node Leases: listed").await;
    let first = proc.next_cycle().await;
    assert_eq!(
        first.addresses, 1,
        "the pool holds the Floating IP: {first:?}"
    );
    if let Some(delay) = slow_listing {
        // Every listing from now on is slow; wait until one is under way.
        let listed = bench.hetzner.requests();
        bench.hetzner.set_fault(Some(Fault::Delay(delay)));
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        while bench.hetzner.requests() == listed {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no listing began\n{}",
                proc.tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // The holder's kubelet stops; its last renewal is the start (read once
    // the move began: a renewal under way when it stopped counts too).
    kubelets.stop(1);
    let (started, moving) = proc
        .wait_message("moving a Floating IP to a healthy member")
        .await;
    let stopped = kubelets.last_renewal(1).expect("node-1 renewed").into_std();
    assert_eq!(moving["reason"], "silent", "{moving}");
    let (ended, moved) = proc.wait_message("Floating IP moved").await;
    let holder = holder_of(bench.hetzner, 900);
    assert!(matches!(holder, Some(2 | 3)), "the IP is on {holder:?}");
    assert_eq!(moved["from"], "node-1", "{moved}");
    let pool = bench.pools().get(POOL).await.expect("the pool");
    assert_eq!(
        pool.data["spec"]["blocks"],
        json!([{ "cidr": format!("{FIP}/32") }]),
        "the pool kept the Floating IP"
    );
    proc.stop();
    bench.hetzner.set_fault(None);
    drop(kubelets);
    for id in 1..=3 {
        let _ = nodes
            .delete(&format!("node-{id}"), &DeleteParams::default())
            .await;
    }
    let _ = bench.pools().delete(POOL, &DeleteParams::default()).await;
    bench.hetzner.set_floating_ips(Vec::new());
    FailoverResult {
        detected: started.at.saturating_duration_since(stopped),
        failover: ended.at.saturating_duration_since(stopped),
    }
}

pub(super) fn print_failover(result: &FailoverResult, slow_listing: Option<Duration>) {
    let floor = FailoverResult::floor();
    let over = result.failover.saturating_sub(floor);
    let loop_state = match slow_listing {
        None => "the loop idle".to_owned(),
        Some(delay) => format!("a {} s listing in flight", delay.as_secs()),
    };
    println!(
        "Floating IP failover ({loop_state}; the holder's kubelet stops; FailoverAfter {} s, \
         simulated Action {} s, Lease renewals every {} s), from its last renewal: move started \
         after {:.1} s, Action succeeded after {:.1} s; floor (FailoverAfter + Action) {:.1} s, \
         {:.1} s above it (target: within 2 s, {}).",
        AFTER.as_secs(),
        ACTION.as_secs(),
        RENEW.as_secs(),
        result.detected.as_secs_f64(),
        result.failover.as_secs_f64(),
        floor.as_secs_f64(),
        over.as_secs_f64(),
        if over <= Duration::from_secs(2) {
            "met"
        } else {
            "missed"
        }
    );
}
