//! The monitoring shipped in deploy/monitoring: the alerts (a
//! PrometheusRule) and the Grafana dashboard. Prometheus' own promtool
//! (`CANADA_KAKTUS_PROMTOOL_BIN_DIR`, built by scripts/promtool-bins.sh)
//! parses every alert and every dashboard query and runs the alerts' unit
//! tests (tests/fixtures/monitoring/alerts_test.yaml); every series they
//! read is one the metrics page (docs/reference/metrics.md) names, which
//! tests/hermetic/docs.rs holds to what /metrics serves; the monitoring
//! guide lists every alert; the chart ships the same files.
//!
//! The promtool tests are `#[ignore]`d (counted as ignored by a plain
//! `cargo test`); scripts/test runs them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::docs::page;

const PROMTOOL_DIR_ENV: &str = "CANADA_KAKTUS_PROMTOOL_BIN_DIR";

fn promtool() -> PathBuf {
    let dir = std::env::var_os(PROMTOOL_DIR_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("{PROMTOOL_DIR_ENV} is not set: run scripts/test, or set it to what scripts/promtool-bins.sh prints")
        });
    PathBuf::from(dir).join("promtool")
}

fn promtool_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running promtool")
}

fn shown(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The PrometheusRule's `spec` (a Prometheus rule file), as YAML.
fn rule_spec() -> Value {
    let rule: Value =
        serde_yaml_ng::from_str(&page("deploy/monitoring/prometheusrule.yaml")).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

/// Every alert's expression, and every dashboard query with Grafana's
/// variables replaced as Grafana would (`$pool` by "All").
fn expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for group in rule_spec()["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            out.push((
                rule["alert"].as_str().unwrap().to_owned(),
                rule["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let dashboard: Value = serde_json::from_str(&page("deploy/monitoring/dashboard.json")).unwrap();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let title = panel["title"].as_str().unwrap_or_default();
            out.push((
                format!("dashboard panel {title:?}"),
                expr.replace("$__rate_interval", "5m")
                    .replace("${pool:regex}", ".*")
                    .replace("$pool", ".*"),
            ));
        }
    }
    out
}

#[test]
#[ignore = "needs promtool (scripts/promtool-bins.sh): scripts/test runs it"]
fn promtool_parses_the_alerts_and_their_unit_tests_pass() {
    let dir = tempfile::tempdir().unwrap();
    let rules = serde_yaml_ng::to_string(&rule_spec()).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), &rules).unwrap();
    std::fs::write(
        dir.path().join("alerts_test.yaml"),
        page("tests/fixtures/monitoring/alerts_test.yaml"),
    )
    .unwrap();
    let checked = promtool_in(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(checked.status.success(), "{}", shown(&checked));
    let tested = promtool_in(dir.path(), &["test", "rules", "alerts_test.yaml"]);
    assert!(tested.status.success(), "{}", shown(&tested));

    // The unit tests can fail: with one alert's severity changed they do.
    let altered = rules.replacen("severity: critical", "severity: page", 1);
    assert_ne!(altered, rules);
    std::fs::write(dir.path().join("rules.yaml"), altered).unwrap();
    let tested = promtool_in(dir.path(), &["test", "rules", "alerts_test.yaml"]);
    assert!(!tested.status.success(), "{}", shown(&tested));
}

#[test]
#[ignore = "needs promtool (scripts/promtool-bins.sh): scripts/test runs it"]
fn promtool_parses_every_dashboard_query() {
    let dir = tempfile::tempdir().unwrap();
    let queries: Vec<_> = expressions()
        .into_iter()
        .filter(|(name, _)| name.starts_with("dashboard"))
        .collect();
    assert!(queries.len() > 20, "{queries:?}");
    // Each query as a recording rule: promtool parses rule files only.
    let as_rules = |queries: &[(String, String)]| {
        let rules: Vec<Value> = queries
            .iter()
            .enumerate()
            .map(|(i, (_, expr))| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": expr}))
            .collect();
        serde_yaml_ng::to_string(
            &serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}),
        )
        .unwrap()
    };
    std::fs::write(dir.path().join("queries.yaml"), as_rules(&queries)).unwrap();
    let checked = promtool_in(dir.path(), &["check", "rules", "queries.yaml"]);
    assert!(
        checked.status.success(),
        "{}\n{queries:#?}",
        shown(&checked)
    );

    // A query Prometheus cannot parse is refused.
    let mut broken = queries.clone();
    broken.push((
        "broken".into(),
        "sum(rate(canada_kaktus_reconcile_total[5m])".into(),
    ));
    std::fs::write(dir.path().join("queries.yaml"), as_rules(&broken)).unwrap();
    let checked = promtool_in(dir.path(), &["check", "rules", "queries.yaml"]);
    assert!(!checked.status.success(), "{}", shown(&checked));
}

/// Every `canada_kaktus_*` name in a PromQL expression (a histogram's
/// `_bucket`, `_sum` and `_count` as the histogram).
fn series_in(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("canada_kaktus_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let name = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        names.insert(name.to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn every_series_the_alerts_and_the_dashboard_read_is_in_the_metrics_table() {
    let table: BTreeSet<String> = crate::docs::metric_rows()
        .into_iter()
        .flat_map(|(names, _)| {
            // `canada_kaktus_hcloud_ratelimit_remaining` / `_limit`
            let base = names[0]
                .rsplit_once('_')
                .map(|(b, _)| b.to_owned())
                .unwrap_or_default();
            names.into_iter().map(move |n| {
                if n.starts_with('_') {
                    format!("{base}{n}")
                } else {
                    n
                }
            })
        })
        .collect();
    assert!(table.len() > 20, "{table:?}");
    let mut problems = Vec::new();
    for (name, expr) in expressions() {
        for series in series_in(&expr) {
            if !table.contains(&series) {
                problems.push(format!(
                    "{name} reads {series}, which the metrics table does not name"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check can fail.
    assert!(!table.contains("canada_kaktus_made_up_total"));
    assert_eq!(
        series_in("rate(canada_kaktus_made_up_total[5m]) + canada_kaktus_x_bucket"),
        BTreeSet::from([
            "canada_kaktus_made_up_total".to_owned(),
            "canada_kaktus_x".to_owned()
        ])
    );
}

#[test]
fn the_chart_ships_the_same_alerts_and_dashboard() {
    assert_eq!(
        page("deploy/helm/canada-kaktus/files/dashboard.json"),
        page("deploy/monitoring/dashboard.json"),
        "copy deploy/monitoring/dashboard.json to the chart's files/"
    );
    let chart: Value =
        serde_yaml_ng::from_str(&page("deploy/helm/canada-kaktus/files/alerts.yaml")).unwrap();
    assert_eq!(
        chart,
        rule_spec(),
        "the chart's files/alerts.yaml must be the PrometheusRule's spec"
    );
}

#[test]
fn the_monitoring_guide_lists_every_alert() {
    let readme = page("docs/guides/monitoring.md");
    for (name, _) in expressions()
        .iter()
        .filter(|(n, _)| n.starts_with("CanadaKaktus"))
    {
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "docs/guides/monitoring.md's alert table lacks {name}"
        );
    }
}

/// Where the shipped alerts' runbooks live: `docs/` of this release's tag
/// (the chart's `runbookBaseURL` and the kustomize component `runbook-url`
/// point them elsewhere).
fn default_runbook_base() -> String {
    format!(
        "https://github.com/canada-kaktus/canada-kaktus/blob/v{}/docs",
        env!("CARGO_PKG_VERSION")
    )
}

#[test]
fn every_alert_has_a_runbook_entry_of_this_release() {
    let guide = page("docs/guides/troubleshooting.md");
    let entries = crate::manual::anchors(&guide);
    let spec = rule_spec();
    let mut problems = Vec::new();
    let mut alerts = 0;
    for group in spec["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let Some(name) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let anchor = name.to_lowercase();
            let expected = format!(
                "{}/guides/troubleshooting.md#{anchor}",
                default_runbook_base()
            );
            if rule["annotations"]["runbook_url"] != expected.as_str() {
                problems.push(format!(
                    "{name}: runbook_url {} instead of {expected}",
                    rule["annotations"]["runbook_url"]
                ));
            }
            if !guide.contains(&format!("\n### `{name}`\n")) || !entries.contains(&anchor) {
                problems.push(format!(
                    "{name}: docs/guides/troubleshooting.md has no entry \"### `{name}`\""
                ));
            }
        }
    }
    assert_eq!(alerts, 15);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The chart's template swaps the same base for runbookBaseURL.
    let template = page("deploy/helm/canada-kaktus/templates/monitoring.yaml");
    assert!(
        template.contains(
            "regexReplaceAll \"https://github.com/canada-kaktus/canada-kaktus/blob/[^/]+/docs/\""
        ),
        "the chart replaces the default base of files/alerts.yaml"
    );
    let chart = page("deploy/helm/canada-kaktus/Chart.yaml");
    assert!(
        chart.contains(&format!("appVersion: \"{}\"", env!("CARGO_PKG_VERSION"))),
        "the chart's appVersion is this release"
    );
}
