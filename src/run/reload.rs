//! Config reloads: the loop polls the config file and, when it changed,
//! loads the settings again from it and the environment. A bad, unreadable
//! or vanished file keeps the last good settings (reported in `/health`).
//! Settings that apply only at start (log format, listen address, leader
//! election, the endpoint) draw a warning, and the running endpoint is kept
//! so an edited ConfigMap cannot send the token elsewhere. A reload never
//! lists Hetzner or writes the pool itself.

use std::sync::Arc;

use tracing::{error, info, warn};

use std::collections::BTreeSet;

use tokio::time::Instant;

use super::{ControlLoop, Flow, Running};
use crate::config::{self, Settings};
use crate::world::hetzner_client;

impl ControlLoop {
    /// Looks at the config file; a change is loaded, and a valid one takes
    /// effect at once with a full cycle.
    pub(super) async fn poll_config(&mut self, st: &mut Running) -> Flow {
        let current = ConfigFile::read(&st.config.path).await;
        if current == st.config.snapshot {
            return Flow::Go;
        }
        st.config.snapshot = current;
        let path = st.config.path.clone();
        let before = Arc::clone(&self.settings);
        let reloaded = match self.unusable_config_file(&st.config.snapshot, &path) {
            Some(problem) => {
                error!(path = %path.display(), error = %problem, "config reload rejected; keeping the previous config");
                self.health.record_config_reload(Some(problem));
                false
            }
            None => self.reload_config(&path).await,
        };
        self.metrics.config_reloaded(reloaded);
        if reloaded {
            self.metrics.set_interval(self.interval());
            self.announce_pools();
            let names: BTreeSet<String> =
                self.settings.pools.iter().map(|p| p.name.clone()).collect();
            st.schedule.on_reload(self.clocks(), &names, Instant::now());
            // The listing in flight read for the old settings; the reload
            // lists anew at once.
            super::full::stop(&mut st.listing).await;
            st.pool_watches.retain(|name, _| names.contains(name));
            // New pools or another API: moves wait for the listing the
            // reload brings. Later moves use the clients of their look.
            if before.pools != self.settings.pools
                || before.hcloud_endpoint != self.settings.hcloud_endpoint
                || before.token != self.settings.token
            {
                st.mover.reset(&self.metrics);
            }
            self.ensure_lease_watch(st);
            self.ensure_holder_labels(st);
            self.show_mover(st);
            // The Node view keeps only the labels the selectors name: new
            // names need a fresh Node list (nothing is added before it).
            let client = self.reconciler.clients().kube.clone();
            if st.nodes.follow(&client, &self.settings) {
                info!("the pools' Node selectors name other labels now; listing the Nodes again");
            }
            // A reload that changed what a listing means forgot it.
            self.show_listing();
        }
        Flow::Go
    }

    /// Why the config file as it is now cannot replace the running config:
    /// it cannot be read, or it disappeared although the running config came
    /// from it (a deleted optional ConfigMap must not silently bring back the
    /// built-in defaults, such as the default label selector).
    pub(super) fn unusable_config_file(
        &self,
        file: &ConfigFile,
        path: &std::path::Path,
    ) -> Option<String> {
        match file {
            ConfigFile::Unreadable(reason) => Some(format!(
                "config file {} cannot be read ({reason}); fix its permissions or the volume",
                path.display()
            )),
            ConfigFile::Missing if self.settings.config_file.is_some() => Some(format!(
                "config file {} disappeared; the configuration read from it stays in force \
                 (restore the file, or restart to run without it)",
                path.display()
            )),
            ConfigFile::Unknown | ConfigFile::Missing | ConfigFile::Present(_) => None,
        }
    }

    /// Loads the config again (off the async runtime: a slow volume must
    /// not stall the loop); a valid change takes effect at once, an invalid
    /// one is logged and the last good config stays in force.
    pub(super) async fn reload_config(&mut self, path: &std::path::Path) -> bool {
        let cli_config = self.cli_config.clone();
        let env = self.env.clone();
        let loaded = tokio::task::spawn_blocking(move || config::load(cli_config.as_deref(), &env))
            .await
            .unwrap_or_else(|panicked| {
                Err(config::ConfigErrors(vec![config::ConfigProblem {
                    setting: None,
                    message: format!("loading the config failed: {panicked}"),
                }]))
            });
        match loaded {
            Ok(mut new) => {
                self.keep_start_only_settings(&mut new);
                self.apply_reloaded(new, path)
            }
            Err(errors) => {
                error!(path = %path.display(), errors = %errors, "config reload rejected; keeping the previous config");
                self.health.record_config_reload(Some(errors.to_string()));
                false
            }
        }
    }

    /// Settings that apply only at start draw a warning; the endpoint
    /// stays as it was.
    fn keep_start_only_settings(&self, new: &mut Settings) {
        if new.log_format != self.settings.log_format {
            warn!(
                setting = "LogFormat",
                "the log format changes only after a restart"
            );
        }
        if new.listen_address != self.settings.listen_address {
            warn!(
                setting = "ListenAddress",
                "the listen address changes only after a restart"
            );
        }
        let operate = (&new.operate, &self.settings.operate);
        if (
            operate.0.leader_election,
            &operate.0.lease_name,
            &operate.0.lease_namespace,
            operate.0.lease_duration,
            operate.0.watch_nodes,
            operate.0.events,
        ) != (
            operate.1.leader_election,
            &operate.1.lease_name,
            &operate.1.lease_namespace,
            operate.1.lease_duration,
            operate.1.watch_nodes,
            operate.1.events,
        ) {
            warn!(
                settings = "LeaderElection, LeaseName, LeaseNamespace, LeaseDuration, WatchNodes, Events",
                "these settings change only after a restart (NodeDebounce and NodeMinGap apply at once)"
            );
        }
        // Whoever can edit the ConfigMap must not be able to send the
        // token somewhere else: the endpoint is fixed at start.
        if new.hcloud_endpoint != self.settings.hcloud_endpoint
            || new.hcloud_allow_http != self.settings.hcloud_allow_http
        {
            warn!(
                settings = "HcloudEndpoint, HcloudAllowHttp",
                endpoint = %self.settings.hcloud_endpoint,
                "these settings change only after a restart; the running endpoint stays"
            );
            new.hcloud_endpoint = self.settings.hcloud_endpoint.clone();
            new.hcloud_allow_http = self.settings.hcloud_allow_http;
        }
        // The same for the Robot endpoint (the credentials may change).
        if new.robot_endpoint != self.settings.robot_endpoint {
            warn!(
                settings = "RobotEndpoint",
                endpoint = %self.settings.robot_endpoint,
                "this setting changes only after a restart; the running endpoint stays"
            );
            new.robot_endpoint = self.settings.robot_endpoint.clone();
        }
    }

    /// Puts valid reloaded settings into force: a new Hetzner client when
    /// its budget or timeout changed, the log level, and a fresh start for
    /// what a listing meant under the old pools. `false` when the new
    /// client cannot be built (the old settings stay).
    fn apply_reloaded(&mut self, new: Settings, path: &std::path::Path) -> bool {
        // A new client starts with a full budget: acceptable for the
        // rare reload that changes the budget or the timeout.
        if new.hcloud_timeout != self.settings.hcloud_timeout
            || new.guards.hcloud_request_budget != self.settings.guards.hcloud_request_budget
        {
            match hetzner_client(&new) {
                Ok(client) => self.reconciler.replace_hetzner(client),
                Err(e) => {
                    error!(error = %e, "config reload rejected; keeping the previous config");
                    self.health.record_config_reload(Some(e.to_string()));
                    return false;
                }
            }
        }
        for warning in &new.warnings {
            warn!(%warning, "config");
        }
        self.log.set_level(new.log_level);
        self.health.record_config_reload(None);
        info!(path = %path.display(), "configuration reloaded");
        for pool in dropped_pools(&self.settings, &new) {
            info!(
                pool = %pool,
                "the pool is no longer in the configuration: it is no longer managed and \
                 is left as it is (never deleted); delete it yourself when no Service \
                 needs its addresses"
            );
        }
        if changes_what_a_listing_means(&self.settings, &new) {
            // A hold or a pool rendered under the old selector or
            // template must not be confirmed or re-applied.
            self.reconciler.forget();
        }
        self.settings = Arc::new(new);
        true
    }
}

/// The config file as the poll last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ConfigFile {
    /// Not looked at yet: the next look is a change, whatever it finds.
    Unknown,
    Missing,
    /// It exists but could not be read (permissions, I/O error, a directory).
    Unreadable(String),
    Present(Vec<u8>),
}

impl ConfigFile {
    /// [`crate::config::digest`] of the bytes, when there are any.
    pub(super) fn digest(&self) -> Option<u64> {
        match self {
            ConfigFile::Present(bytes) => Some(crate::config::digest(bytes)),
            _ => None,
        }
    }

    /// Reads the file (at most `MAX_CONFIG_FILE_BYTES`) on the blocking
    /// pool, off the async runtime.
    pub(super) async fn read(path: &std::path::Path) -> Self {
        let owned = path.to_owned();
        let read = tokio::task::spawn_blocking(move || crate::config::read_config_file(&owned))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        match read {
            Ok(bytes) => ConfigFile::Present(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ConfigFile::Missing,
            Err(e) => ConfigFile::Unreadable(e.to_string()),
        }
    }
}

/// Whether a reload changes which servers a listing selects or what the
/// pools render, so that what was listed or held before no longer applies.
fn changes_what_a_listing_means(old: &Settings, new: &Settings) -> bool {
    old.pools != new.pools || old.guards != new.guards
}

/// The pools `old` manages that `new` does not: they are left as they are.
fn dropped_pools<'a>(old: &'a Settings, new: &Settings) -> Vec<&'a str> {
    old.pools
        .iter()
        .map(|p| p.name.as_str())
        .filter(|name| !new.pools.iter().any(|p| p.name == *name))
        .collect()
}
