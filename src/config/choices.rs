//! The settings that are a choice among names (log level and format, the
//! Cilium API version, the blocked-address policy, leader election), each
//! with its accepted spellings. Pure.

use crate::vocab::quote::quote;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

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

/// A setting that is one of a few words, written once: `as_str` (the
/// canonical word), `Display`, and `FromStr` taking the canonical word and
/// its aliases in any case, after an optional prefix people copy along.
macro_rules! choice {
    (
        $name:ident, what: $what:literal, accepted: $accepted:literal,
        $(strip: $prefix:literal,)?
        { $($variant:ident => $word:literal $(| $alias:literal)*),+ $(,)? }
    ) => {
        impl $name {
            /// Every canonical word, in the order declared.
            pub const WORDS: &'static [&'static str] = &[$($word),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }
        }

        impl FromStr for $name {
            type Err = ChoiceError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let lower = s.trim().to_ascii_lowercase();
                let word = lower.as_str();
                $(let word = word.strip_prefix($prefix).unwrap_or(word);)?
                match word {
                    $($word $(| $alias)* => Ok($name::$variant),)+
                    _ => Err(ChoiceError {
                        value: s.to_owned(),
                        what: $what,
                        accepted: $accepted,
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}

// logrus (the Go version's logger) accepted the aliases too; mapping them
// keeps an old config.json working.
choice!(LogLevel, what: "log level", accepted: "Debug, Info, Warn or Error (any case)", {
    Debug => "debug" | "trace",
    Info => "info",
    Warn => "warn" | "warning",
    Error => "error" | "fatal" | "panic",
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LogFormat {
    /// Text when stderr is a terminal (a person), else JSON (a pod, a pipe).
    #[default]
    Auto,
    Json,
    Text,
}

choice!(LogFormat, what: "log format", accepted: "auto, json or text (any case)", {
    Auto => "auto",
    Json => "json",
    Text => "text",
});

impl LogFormat {
    /// The format to write: `Auto` is text at a terminal, JSON elsewhere.
    pub fn resolve(self, terminal: bool) -> LogFormat {
        match self {
            LogFormat::Auto if terminal => LogFormat::Text,
            LogFormat::Auto => LogFormat::Json,
            chosen => chosen,
        }
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

// People copy the apiVersion line from a manifest.
choice!(CiliumApiVersion, what: "Cilium API version",
    accepted: "auto, v2 or v2alpha1 (any case)", strip: "cilium.io/", {
    Auto => "auto",
    V2 => "v2",
    V2Alpha1 => "v2alpha1",
});

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

/// A kind of address a pool takes from each matching server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressKind {
    /// The public IPv4 (the single-pool behaviour).
    PublicIpv4,
    /// One `/128` from the server's public `/64`.
    PublicIpv6,
    /// The server's address in a private network.
    PrivateIpv4,
    /// Floating IPs assigned to the server.
    FloatingIp,
    /// A Robot server's additional single IPs (`GET /ip`).
    RobotAdditionalIp,
    /// The Robot failover IPs routed to the server now (`GET /failover`).
    RobotFailoverIp,
}

impl AddressKind {
    /// Only Robot (dedicated) servers have addresses of this kind.
    pub fn robot_only(self) -> bool {
        matches!(self, Self::RobotAdditionalIp | Self::RobotFailoverIp)
    }
}

choice!(AddressKind, what: "address kind",
    accepted: "public-ipv4, public-ipv6, private-ipv4, floating-ip, robot-additional-ip or \
               robot-failover-ip", {
    PublicIpv4 => "public-ipv4",
    PublicIpv6 => "public-ipv6",
    PrivateIpv4 => "private-ipv4",
    FloatingIp => "floating-ip",
    RobotAdditionalIp => "robot-additional-ip",
    RobotFailoverIp => "robot-failover-ip",
});
