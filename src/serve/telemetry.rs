//! Logging: JSON lines by default, plain text for people; the level can be
//! changed while running when config.json is reloaded.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

use crate::config::{LogFormat, LogLevel};

/// Libraries whose debug output drowns ours; they stay at `warn` unless the
/// level is `Debug`, where the kube and HTTP client details help.
const QUIET_AT_INFO: &str =
    "hyper=warn,hyper_util=warn,h2=warn,rustls=warn,tower=warn,kube_client=warn,reqwest=warn";

pub fn filter_for(level: LogLevel) -> EnvFilter {
    let directives = match level {
        LogLevel::Debug => {
            "debug,hyper=info,hyper_util=info,h2=info,rustls=info,tower=info".to_owned()
        }
        LogLevel::Info => format!("info,{QUIET_AT_INFO}"),
        LogLevel::Warn => "warn".to_owned(),
        LogLevel::Error => "error".to_owned(),
    };
    EnvFilter::new(directives)
}

/// Changes the log level of the running process.
#[derive(Clone)]
pub struct LogControl {
    handle: Option<reload::Handle<EnvFilter, Registry>>,
}

impl LogControl {
    pub fn set_level(&self, level: LogLevel) {
        if let Some(handle) = &self.handle {
            if let Err(error) = handle.reload(filter_for(level)) {
                tracing::warn!(%error, "could not change the log level");
            }
        }
    }

    /// For tests and tools that don't install a subscriber.
    pub fn detached() -> Self {
        Self { handle: None }
    }
}

/// Installs the global subscriber, writing to stderr so `--dry-run` output on
/// stdout stays clean. A second call (tests) leaves the first in place.
pub fn init(level: LogLevel, format: LogFormat) -> LogControl {
    init_with_writer(level, format, std::io::stderr)
}

/// [`init`] with another output (tests read what the controller logs).
pub fn init_with_writer<W>(level: LogLevel, format: LogFormat, writer: W) -> LogControl
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let (filter, handle) = reload::Layer::new(filter_for(level));
    let output = match format.resolve(std::io::stderr().is_terminal()) {
        LogFormat::Json | LogFormat::Auto => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_target(true)
            .with_writer(writer)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_target(true)
            // Colour only for a person at a terminal, not for `kubectl logs`.
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(writer)
            .boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .try_init()
        .is_ok();
    LogControl {
        handle: installed.then_some(handle),
    }
}
