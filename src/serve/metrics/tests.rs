use super::*;

#[test]
fn renders_every_family_with_the_prefix() {
    let metrics = Metrics::new();
    metrics.set_leader(true);
    metrics.config_reloaded(false);
    metrics.set_pools(["covidnetes-pool"]);
    metrics.record_skipped(
        "covidnetes-pool",
        ["no_public_ipv4", "no_public_ipv4", "unknown"],
    );
    let text = metrics.render();
    for line in [
        "canada_kaktus_leader 1",
        "canada_kaktus_config_reloads_total{result=\"failure\"} 1",
        "canada_kaktus_config_reloads_total{result=\"success\"} 0",
        "canada_kaktus_servers_skipped{pool=\"covidnetes-pool\",reason=\"no_public_ipv4\"} 2",
        "canada_kaktus_servers_skipped{pool=\"covidnetes-pool\",reason=\"invalid_ipv4\"} 0",
        "canada_kaktus_hcloud_ratelimit_remaining -1",
        "canada_kaktus_last_success_timestamp_seconds{pool=\"covidnetes-pool\"} 0.0",
        "canada_kaktus_pool_changes_total{pool=\"covidnetes-pool\",change=\"added\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing in:\n{text}"
        );
    }
    assert!(
        text.contains(&format!(
            "canada_kaktus_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[test]
fn hetzner_requests_are_counted_by_code() {
    let metrics = Metrics::new();
    metrics.request_finished(
        &RequestOutcome::Status {
            status: 200,
            rate_limit: Some(crate::hetzner::RateLimit {
                limit: Some(3600),
                remaining: Some(3599),
                reset: None,
            }),
        },
        Duration::from_millis(20),
    );
    metrics.request_finished(
        &RequestOutcome::Failed { kind: "timeout" },
        Duration::from_secs(30),
    );
    let text = metrics.render();
    assert!(
        text.contains("canada_kaktus_hcloud_requests_total{code=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("canada_kaktus_hcloud_requests_total{code=\"timeout\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("canada_kaktus_hcloud_ratelimit_remaining 3599"),
        "{text}"
    );
    assert!(
        text.contains("canada_kaktus_hcloud_request_duration_seconds_count 2"),
        "{text}"
    );
}

#[test]
fn a_pool_dropped_from_the_config_loses_its_gauges() {
    let metrics = Metrics::new();
    metrics.set_pools(["edge", "internal"]);
    let report = CycleReport {
        kind: CycleKind::Full,
        pool: "internal".into(),
        addresses: 4,
        listing: Some(crate::reconcile::ListingSummary::default()),
        ..CycleReport::default()
    };
    metrics.record_cycle("internal", CycleKind::Full, Ok(&report));
    assert!(metrics
        .render()
        .contains("canada_kaktus_pool_addresses{pool=\"internal\"} 4"));
    // No longer managed: a frozen last_success or address count would read
    // as a pool that stopped working.
    metrics.set_pools(["edge"]);
    let text = metrics.render();
    let gauges = [
        "canada_kaktus_last_success_timestamp_seconds",
        "canada_kaktus_pool_addresses",
        "canada_kaktus_servers_matched",
        "canada_kaktus_servers_skipped",
        "canada_kaktus_servers_excluded",
        "canada_kaktus_addresses_withheld",
        "canada_kaktus_blocked_addresses",
    ];
    for line in text.lines() {
        let stale = gauges.iter().any(|g| line.starts_with(&format!("{g}{{")))
            && line.contains("pool=\"internal\"");
        assert!(!stale, "{line} still exported:\n{text}");
    }
    assert!(
        text.contains("canada_kaktus_last_success_timestamp_seconds{pool=\"edge\"} 0.0"),
        "{text}"
    );
    // Counters stay: they are totals, and rate() copes with their end.
    assert!(
        text.contains(
            "canada_kaktus_reconcile_total{pool=\"internal\",kind=\"full\",result=\"success\"} 1"
        ),
        "{text}"
    );
}

/// Each per-pool series that says what a pool holds now (not a counter,
/// not the last success).
fn current_view_lines(text: &str, pool: &str) -> Vec<String> {
    let label = format!("pool=\"{pool}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
        .filter(|l| {
            [
                "canada_kaktus_pool_addresses",
                "canada_kaktus_servers_matched",
                "canada_kaktus_servers_excluded",
                "canada_kaktus_addresses_withheld",
                "canada_kaktus_blocked_addresses",
                "canada_kaktus_floating_ips_stranded",
            ]
            .iter()
            .any(|family| l.starts_with(&format!("{family}{{")))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_pool_dropped_from_the_configuration_leaves_its_stranded_gauge() {
    let metrics = Metrics::new();
    metrics.set_pools(["edge"]);
    metrics.set_stranded("edge", 2);
    assert_eq!(current_view_lines(&metrics.render(), "edge").len(), 1);
    metrics.set_pools(["other"]);
    assert_eq!(
        current_view_lines(&metrics.render(), "edge"),
        Vec::<String>::new()
    );
}

#[test]
fn a_replica_that_stops_leading_drops_what_it_knew_of_the_pools() {
    let metrics = Metrics::new();
    metrics.set_pools(["edge"]);
    metrics.set_leader(true);
    let report = CycleReport {
        pool: "edge".into(),
        addresses: 3,
        listing: Some(crate::reconcile::ListingSummary::default()),
        ..CycleReport::default()
    };
    metrics.record_cycle("edge", CycleKind::Full, Ok(&report));
    metrics.set_stranded("edge", 1);
    let led = metrics.render();
    assert!(
        led.contains("canada_kaktus_pool_addresses{pool=\"edge\"} 3"),
        "{led}"
    );
    assert!(!current_view_lines(&led, "edge").is_empty());

    // A standby's figures would be stale: the new leader's count.
    metrics.set_leader(false);
    let standby = metrics.render();
    assert_eq!(current_view_lines(&standby, "edge"), Vec::<String>::new());
    assert!(standby.contains("canada_kaktus_leader 0"));
    // When the pool last succeeded stays true (max by pool picks the
    // leader's newer figure).
    assert!(
        standby.lines().any(|l| l
            .starts_with("canada_kaktus_last_success_timestamp_seconds{pool=\"edge\"}")
            && !l.ends_with(" 0.0")),
        "{standby}"
    );
}
