//! Three pools from one listing (issue 11): the same N servers give an
//! IPv4, an IPv6 and a private pool. The three pools' selectors differ, so
//! the controller lists the project once without a selector and matches
//! each pool here: a cycle must cost ceil(N/50) requests, as one pool does,
//! never one listing per pool.

use super::*;
use kube::api::DeleteParams;
use serde_json::json;
use support::fake_hetzner::{numbered_servers, FakePrivateNet, DEFAULT_NETWORK};

const NAMES: [&str; 3] = ["bench-v4", "bench-v6", "bench-private"];

/// Deletes `names` (the pools of an earlier run would be foreign pools
/// covering these addresses) and waits until they are gone.
pub(super) async fn delete_pools(bench: &SizeBench<'_>, names: &[&str]) {
    let api = bench.pools();
    for name in names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => panic!("deleting pool {name}: {e}"),
        }
        let deadline = std::time::Instant::now() + STEP_TIMEOUT;
        while api.get_opt(name).await.expect("reading a pool").is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "pool {name} was not deleted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Hetzner requests per full cycle of the three-pool controller.
pub(super) struct PoolsResult {
    pub(super) n: usize,
    pub(super) requests: Vec<usize>,
}

const CYCLES: usize = 3;

pub(super) async fn three_pools(bench: &SizeBench<'_>) -> PoolsResult {
    delete_pools(bench, &[POOL_NAME]).await;
    // Private addresses apart from the public ones (which the fake draws from
    // 10.0.0.0/8 too).
    bench.hetzner.set_servers(
        numbered_servers(bench.n)
            .into_iter()
            .map(|server| {
                let [_, b, c, d] = u32::try_from(server.id).unwrap_or(0).to_be_bytes();
                server.with_private_net(vec![FakePrivateNet {
                    network: DEFAULT_NETWORK,
                    ip: format!("172.{}.{c}.{d}", 16 + b),
                    alias_ips: vec![],
                }])
            })
            .collect(),
    );
    let pools = json!([
        {"Name": "bench-v4", "LabelSelector": "kops.k8s.io/instance-role=Node",
         "Addresses": ["public-ipv4"], "MaxRemovalRatio": 1},
        {"Name": "bench-v6", "LabelSelector": "kops.k8s.io/instance-role",
         "Addresses": ["public-ipv6"], "MaxRemovalRatio": 1},
        {"Name": "bench-private", "LabelSelector": "!bench-excluded",
         "Addresses": ["private-ipv4"], "MaxRemovalRatio": 1},
    ]);
    bench.hetzner.forget_requests().await;
    let mut proc = bench.spawn_pools("1s", &pools, &[]);
    // Each cycle logs one line per pool; the request count is read at the
    // last pool's line of each cycle.
    let mut marks = Vec::new();
    for _ in 0..=CYCLES {
        let mut last = None;
        for _ in 0..3 {
            let cycle = proc.next_cycle().await;
            assert_eq!(cycle.kind, "full", "{cycle:?}");
            assert!(cycle.addresses > 0, "an empty pool: {cycle:?}");
            last = Some(cycle);
        }
        let cycle = last.expect("three lines");
        bench.hetzner.refill_rate_limit();
        marks.push(cycle.snap.requests);
    }
    proc.stop();
    delete_pools(bench, &NAMES).await;
    let requests: Vec<usize> = marks.windows(2).map(|w| w[1] - w[0]).collect();
    for r in &requests {
        assert_eq!(
            *r,
            bench.n.div_ceil(PER_PAGE),
            "N={}: three pools must cost one listing per cycle",
            bench.n
        );
    }
    PoolsResult {
        n: bench.n,
        requests,
    }
}
