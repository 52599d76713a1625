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
