//! The control loop in process, against the fake Hetzner API and the
//! in-memory Kubernetes API: the quick retry policy and Hetzner options, the
//! fast loop timings, and the wiring from settings to a `ControlLoop`. A test
//! that needs other values overrides only those, with struct update syntax:
//! `RetryPolicy { max_retries: 0, ..quick_retry() }`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use canada_kaktus::config::{CiliumApiVersion, Settings};
use canada_kaktus::hetzner::{HetznerClient, HetznerOptions, RetryPolicy};
use canada_kaktus::reconcile::Clients;
use canada_kaktus::run::{ControlLoop, LoopTimings};

/// One retry, backoff from 1 ms capped at 5 ms, at most 10 ms waited for
/// the rate limit: retries happen, nothing waits long.
pub fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 1,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_rate_limit_wait: Duration::from_millis(10),
    }
}

/// `HetznerOptions::new(endpoint)` with a 2 s request timeout and
/// `quick_retry()`.
pub fn quick_options(endpoint: impl Into<String>) -> HetznerOptions {
    HetznerOptions {
        request_timeout: Duration::from_secs(2),
        retry: quick_retry(),
        ..HetznerOptions::new(endpoint)
    }
}

/// Fast loop timings: a listing every 100 ms (far below the configurable
/// minimum, so a test sees many cycles), cycles limited to 5 s, the config
/// file checked every 50 ms.
pub fn quick_timings() -> LoopTimings {
    LoopTimings {
        debounce: Duration::from_millis(10),
        heartbeat: Duration::from_millis(50),
        cycle_timeout: Duration::from_secs(5),
        config_poll: Duration::from_millis(50),
        retry_base: Duration::from_millis(20),
        interval_override: Some(Duration::from_millis(100)),
        confirm_delay: Duration::from_millis(100),
    }
}

/// The environment naming the token and the Hetzner endpoint, the least the
/// settings load from.
pub fn hcloud_env(token: &str, endpoint: String) -> HashMap<String, String> {
    HashMap::from([
        ("CANADA_KAKTUS_HCLOUD_TOKEN".into(), token.into()),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT".into(), endpoint),
    ])
}

/// The control loop over a Hetzner client with `options` and the pool client
/// on `kube` (Cilium's API version detected), with `timings`; not started.
pub fn control_loop(
    settings: Settings,
    cli_config: Option<PathBuf>,
    env: HashMap<String, String>,
    options: HetznerOptions,
    kube: kube::Client,
    timings: LoopTimings,
) -> ControlLoop {
    let clients = Clients::new(
        kube,
        HetznerClient::new(options).unwrap(),
        CiliumApiVersion::Auto,
    );
    ControlLoop::new(settings, clients, cli_config, env).with_timings(timings)
}
