//! The settings that are a choice among names (log level and format, the
//! Cilium API version, the blocked-address policy, leader election), each
//! with its accepted spellings. Pure.

use crate::hetzner::selector::quote;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// A value that is not one of the accepted words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not a valid {what}; use {accepted}", quote(.value))]
pub struct ChoiceError {
    pub value: String,
    pub what: &'static str,
    pub accepted: &'static str,
}

impl ChoiceError {
    /// The message without the echoed value, for problems that show it already.
    pub(super) fn reason(&self) -> String {
        format!("is not a valid {}; use {}", self.what, self.accepted)
    }
}

impl FromStr for LogLevel {
    type Err = ChoiceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // logrus (the Go version's logger) accepted these words too; mapping
        // them keeps an old config.json working.
        match s.trim().to_ascii_lowercase().as_str() {
            "debug" | "trace" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" | "warning" => Ok(LogLevel::Warn),
            "error" | "fatal" | "panic" => Ok(LogLevel::Error),
            _ => Err(ChoiceError {
                value: s.to_owned(),
                what: "log level",
                accepted: "Debug, Info, Warn or Error (any case)",
            }),
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LogFormat {
    #[default]
    Json,
    Text,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}

impl FromStr for LogFormat {
    type Err = ChoiceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "json" => Ok(LogFormat::Json),
            "text" => Ok(LogFormat::Text),
            _ => Err(ChoiceError {
                value: s.to_owned(),
                what: "log format",
                accepted: "json or text (any case)",
            }),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CiliumApiVersion {
    /// Ask the API server which versions are served; prefer v2.
    #[default]
    Auto,
    V2,
    V2Alpha1,
}

impl CiliumApiVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            CiliumApiVersion::Auto => "auto",
            CiliumApiVersion::V2 => "v2",
            CiliumApiVersion::V2Alpha1 => "v2alpha1",
        }
    }
}

impl FromStr for CiliumApiVersion {
    type Err = ChoiceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        // People copy the apiVersion line from a manifest.
        let version = lower.strip_prefix("cilium.io/").unwrap_or(&lower);
        match version {
            "auto" => Ok(CiliumApiVersion::Auto),
            "v2" => Ok(CiliumApiVersion::V2),
            "v2alpha1" => Ok(CiliumApiVersion::V2Alpha1),
            _ => Err(ChoiceError {
                value: s.to_owned(),
                what: "Cilium API version",
                accepted: "auto, v2 or v2alpha1 (any case)",
            }),
        }
    }
}

impl fmt::Display for CiliumApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a blocked (abuse-locked) Hetzner IPv4 does to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlockedAddresses {
    /// Stays in the pool; reported in logs and metrics. Removing it would take
    /// the address away from a Service that may still hold it.
    #[default]
    Keep,
    /// Left out of the pool, like a server without an IPv4.
    Drop,
}

impl BlockedAddresses {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockedAddresses::Keep => "keep",
            BlockedAddresses::Drop => "drop",
        }
    }
}

/// Whether to take part in leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaderElectionMode {
    /// On when running in a pod (`KUBERNETES_SERVICE_HOST` is set).
    #[default]
    Auto,
    On,
    Off,
}

impl LeaderElectionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaderElectionMode::Auto => "auto",
            LeaderElectionMode::On => "true",
            LeaderElectionMode::Off => "false",
        }
    }

    /// Resolves `auto` against the process environment.
    pub fn enabled(self, env: &HashMap<String, String>) -> bool {
        match self {
            LeaderElectionMode::On => true,
            LeaderElectionMode::Off => false,
            LeaderElectionMode::Auto => env
                .get("KUBERNETES_SERVICE_HOST")
                .is_some_and(|v| !v.trim().is_empty()),
        }
    }
}
