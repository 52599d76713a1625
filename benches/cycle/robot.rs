//! What Robot members cost the Robot webservice (issue 24): a Cloud pool
//! and a pool of the two dedicated servers of tests/fixtures/robot, cycling
//! every second against the fake webservice. The first cycle asks each
//! list the pools need once; the cycles within the next minute ask
//! nothing. Per hour at the default interval (15m) that is four requests
//! per list, and never more than 60 whatever the interval: against the
//! documented 200 `GET /server` and 100 `GET /failover` an hour.

use super::*;
use serde_json::json;
use support::fake_robot::{FakeRobot, PASSWORD, USER};

/// Robot requests per list over the measured cycles.
pub(super) struct RobotResult {
    pub(super) cycles: usize,
    pub(super) seconds: f64,
    /// (`server`, `ip`, `failover`) in the first cycle and in the rest.
    pub(super) first: [usize; 3],
    pub(super) rest: [usize; 3],
}

const CYCLES: usize = 5;
const LISTS: [&str; 3] = ["server", "ip", "failover"];

pub(super) async fn robot_cost(bench: &SizeBench<'_>) -> RobotResult {
    // The pools of the runs before would be foreign pools covering these
    // addresses.
    delete_pools(bench, &[POOL_NAME, super::failover::POOL]).await;
    let robot = FakeRobot::start().await;
    let count = |robot: &FakeRobot| LISTS.map(|list| robot.requests(list));
    let pools = json!([
        {"Name": "bench-cloud", "LabelSelector": "kops.k8s.io/instance-role=Node"},
        {"Name": "bench-robot", "Robot": {"Servers": [321, 421]},
         "Addresses": ["public-ipv4", "robot-additional-ip", "robot-failover-ip"]},
    ]);
    let endpoint = robot.endpoint();
    let mut proc = bench.spawn_pools(
        "1s",
        &pools,
        &[
            ("CANADA_KAKTUS_ROBOT_ENDPOINT", endpoint.as_str()),
            ("CANADA_KAKTUS_ROBOT_USER", USER),
            ("CANADA_KAKTUS_ROBOT_PASSWORD", PASSWORD),
        ],
    );
    let started = cycle(&mut proc).await;
    let first = count(&robot);
    let mut last = started;
    for _ in 0..CYCLES {
        last = cycle(&mut proc).await;
    }
    let now = count(&robot);
    let rest = [0, 1, 2].map(|i| now[i] - first[i]);
    proc.stop();
    delete_pools(bench, &["bench-cloud", "bench-robot"]).await;
    assert_eq!(first, [1, 1, 1], "the first cycle asks each list once");
    assert!(
        last.duration_since(started) >= Duration::from_secs(60) || rest == [0, 0, 0],
        "cycles within a minute of a Robot listing ask nothing: {rest:?}"
    );
    RobotResult {
        cycles: CYCLES,
        seconds: last.duration_since(started).as_secs_f64(),
        first,
        rest,
    }
}

/// The end of one full cycle: two lines, one per pool.
async fn cycle(proc: &mut Controller) -> std::time::Instant {
    for _ in 0..2 {
        let line = proc.next_cycle().await;
        assert_eq!(line.kind, "full", "{line:?}");
        assert!(line.addresses > 0, "an empty pool: {line:?}");
    }
    std::time::Instant::now()
}

pub(super) fn print_robot(result: &RobotResult) {
    let per_hour = |per_listing: usize| per_listing * 4;
    println!(
        "Robot members (a Cloud pool and a pool of 2 dedicated servers, Interval 1s): the \
         first cycle sent GET /server {}, /ip {}, /failover {}; the next {} cycles ({:.0} s) \
         sent {:?}. Per hour at the default interval (15m), computed from one listing per \
         periodic cycle (Node-triggered cycles reuse an answer younger than the interval, retries \
         ask nothing within a minute): {} GET \
         /server (limit 200/h), {} GET /ip (5000/h), {} GET /failover (100/h); at most 60 per \
         list whatever the interval.",
        result.first[0],
        result.first[1],
        result.first[2],
        result.cycles,
        result.seconds,
        result.rest,
        per_hour(result.first[0]),
        per_hour(result.first[1]),
        per_hour(result.first[2]),
    );
}
