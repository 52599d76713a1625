//! The shipped alerts (deploy/monitoring/prometheusrule.yaml) evaluated by
//! Prometheus' own promtool (`CANADA_KAKTUS_PROMTOOL_BIN_DIR`, built by
//! scripts/promtool-bins.sh) on series a test scraped from the controller.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;

const PROMTOOL_DIR_ENV: &str = "CANADA_KAKTUS_PROMTOOL_BIN_DIR";

/// The promtool the test command built; a test that needs it fails
/// without it.
pub fn promtool() -> PathBuf {
    let dir = std::env::var_os(PROMTOOL_DIR_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("{PROMTOOL_DIR_ENV} is not set: run scripts/test, or set it to what scripts/promtool-bins.sh prints")
        });
    PathBuf::from(dir).join("promtool")
}

/// The PrometheusRule's `spec` (a Prometheus rule file), as YAML.
pub fn rule_file() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/prometheusrule.yaml");
    let rule: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_yaml_ng::to_string(&rule["spec"]).unwrap()
}

/// Runs the shipped rules in promtool over the series a test scraped every
/// `step` from one replica: per sample `last_success_timestamp_seconds` of
/// `pool`, `interval_seconds` and when it was taken (promtool's clock
/// starts at the first sample). Asserts that `alert` fires for `pool` at
/// the last sample, and (the control) that it does not with a success at
/// every sample.
pub fn assert_alert_fires(
    promtool: &Path,
    alert: &str,
    pool: &str,
    samples: &[(f64, f64, SystemTime)],
    step: Duration,
) {
    let start = samples.first().expect("samples").2;
    let since_start = |at: SystemTime| at.duration_since(start).unwrap_or_default().as_secs_f64();
    let start_unix = start
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let values = |pick: &dyn Fn(&(f64, f64, SystemTime)) -> f64| {
        samples
            .iter()
            .map(|s| format!("{:.3}", pick(s)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Each value at its sample's time on promtool's clock.
    let last_success = values(&|s| s.0 - start_unix);
    let interval = values(&|s| s.1);
    let step_s = step.as_secs();
    let end = (samples.len() as u64 - 1) * step_s;
    // Samples taken later than every `step` make promtool's clock lag the
    // real one (the alert then fires later, never sooner); a lag of more
    // than 30 s would make the check mean something else.
    let real_end = since_start(samples.last().unwrap().2);
    assert!(
        real_end + 1.0 >= end as f64 && real_end <= end as f64 + 30.0,
        "the samples are not {step:?} apart: the last came at {real_end:.1}s, not {end}s"
    );
    let labels = r#"job="canada-kaktus",instance="127.0.0.1:8080""#;
    let firing = format!(r#"ALERTS{{alertname="{alert}",alertstate="firing",pool="{pool}"}}"#);
    // The control: the same series with a success at every sample.
    let fresh = (0..samples.len())
        .map(|i| format!("{}", i as u64 * step.as_secs()))
        .collect::<Vec<_>>()
        .join(" ");
    let test = format!(
        r#"rule_files:
  - rules.yaml
evaluation_interval: {step_s}s
tests:
  - interval: {step_s}s
    input_series:
      - series: 'canada_kaktus_last_success_timestamp_seconds{{{labels},pool="{pool}"}}'
        values: '{last_success}'
      - series: 'canada_kaktus_interval_seconds{{{labels}}}'
        values: '{interval}'
    promql_expr_test:
      - expr: '{firing}'
        eval_time: {end}s
        exp_samples:
          - labels: '{{__name__="ALERTS",alertname="{alert}",alertstate="firing",pool="{pool}",severity="critical"}}'
            value: 1
  - interval: {step_s}s
    input_series:
      - series: 'canada_kaktus_last_success_timestamp_seconds{{{labels},pool="{pool}"}}'
        values: '{fresh}'
      - series: 'canada_kaktus_interval_seconds{{{labels}}}'
        values: '{interval}'
    promql_expr_test:
      - expr: '{firing}'
        eval_time: {end}s
        exp_samples: []
"#,
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), rule_file()).unwrap();
    std::fs::write(dir.path().join("test.yaml"), &test).unwrap();
    let out = Command::new(promtool)
        .args(["test", "rules", "test.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("running promtool");
    assert!(
        out.status.success(),
        "promtool: {}{}\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
