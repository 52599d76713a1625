use super::*;

#[test]
fn starts_unhealthy_then_follows_the_last_cycle() {
    let health = Health::new(Duration::from_secs(60));
    assert_eq!(health.report().state, Phase::Starting);
    assert!(!health.report().is_healthy());

    health.record_success("p", 3, None);
    let report = health.report();
    assert!(report.is_healthy());
    assert_eq!(report.pool_addresses, Some(3));
    assert!(report.last_success.is_some());

    health.record_failure("p", "Hetzner said no".into());
    let report = health.report();
    assert_eq!(report.state, Phase::Failing);
    assert_eq!(report.last_error.as_deref(), Some("Hetzner said no"));
    assert_eq!(
        report.pool_addresses,
        Some(3),
        "the pool is untouched by a failure"
    );
    assert!(report.last_success.is_some());

    health.record_success("p", 4, None);
    assert!(health.report().is_healthy());
    assert_eq!(health.report().last_error, None);
}

#[tokio::test(start_paused = true)]
async fn liveness_fails_only_when_the_loop_stops_beating() {
    let health = Health::new(Duration::from_secs(60));
    health.record_failure("p", "outage".into());
    assert!(
        health.liveness().alive,
        "a failing cycle is still a live loop"
    );

    tokio::time::advance(Duration::from_secs(61)).await;
    let stale = health.liveness();
    assert!(!stale.alive);
    assert_eq!(stale.seconds_since_loop_heartbeat, 61);

    health.heartbeat();
    assert!(health.liveness().alive);
}

#[test]
fn several_pools_are_healthy_only_together_and_each_is_shown() {
    let health = Health::new(Duration::from_secs(60));
    health.set_pools(["edge", "internal"], true);
    health.record_success("edge", 2, None);
    assert_eq!(
        health.report().state,
        Phase::Starting,
        "internal has not run yet"
    );
    health.record_failure("internal", "pool internal: Hetzner said no".into());
    let report = health.report();
    assert_eq!(report.state, Phase::Failing);
    assert!(!report.is_healthy());
    assert_eq!(
        report.last_error.as_deref(),
        Some("pool internal: Hetzner said no")
    );
    assert_eq!(report.pools[0].state, Phase::Healthy);
    assert_eq!(report.pools[1].state, Phase::Failing);

    health.record_success("internal", 3, Some("shrink guard: holding".into()));
    let report = health.report();
    assert!(report.is_healthy());
    assert_eq!(report.pool_addresses, Some(5));
    assert_eq!(report.notice.as_deref(), Some("shrink guard: holding"));
    assert!(report.last_success.is_some());
    let body = serde_json::to_value(&report).unwrap();
    assert_eq!(body["pools"][1]["name"], "internal");
    assert_eq!(body["pools"][1]["addresses"], 3);
    assert_eq!(body["pools"][1]["notice"], "shrink guard: holding");

    // A reload that drops a pool drops its state; a kept pool keeps it.
    health.set_pools(["internal"], true);
    assert_eq!(health.report().pools.len(), 1);
    assert_eq!(health.report().pool_addresses, Some(3));
}

#[test]
fn one_pool_without_pools_shows_no_pools_list() {
    let health = Health::new(Duration::from_secs(60));
    health.set_pools(["covidnetes-pool"], false);
    health.record_success("covidnetes-pool", 2, None);
    let body = serde_json::to_value(health.report()).unwrap();
    assert!(body.get("pools").is_none(), "{body}");
    assert_eq!(body["pool_addresses"], 2);
    assert_eq!(body["state"], "healthy");
}

/// Issue 44, item 1: a Node step or a repair never clears a full cycle's
/// failure (nor moves `last_success`): while every listing fails, `/health`
/// stays failing however often Nodes change. A step's own failure is
/// cleared by a later step.
#[test]
fn only_a_full_cycle_clears_a_full_cycles_failure() {
    let health = Health::new(Duration::from_secs(60));
    health.record_success("p", 3, None);
    let succeeded = health.report().last_success;
    health.record_failure("p", "listing Hetzner servers failed".into());
    health.record_step("p", 2, None);
    let report = health.report();
    assert_eq!(report.state, Phase::Failing);
    assert_eq!(
        report.last_error.as_deref(),
        Some("listing Hetzner servers failed")
    );
    assert_eq!(report.pool_addresses, Some(2), "what the step wrote");
    assert_eq!(report.last_success, succeeded);
    // A step failing meanwhile does not hide the outage behind its own
    // error, which the next step would clear.
    health.record_step_failure("p", "writing the pool failed".into());
    health.record_step("p", 2, None);
    assert_eq!(
        health.report().last_error.as_deref(),
        Some("listing Hetzner servers failed")
    );
    assert!(!health.report().is_healthy());
    health.record_success("p", 3, None);
    assert!(health.report().is_healthy());

    // A step's own failure is the step's to clear.
    health.record_step_failure("p", "writing the pool failed".into());
    assert!(!health.report().is_healthy());
    health.record_step("p", 3, None);
    assert!(health.report().is_healthy());
    assert_eq!(health.report().last_error, None);
}
