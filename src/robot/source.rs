//! When a cycle lists the Robot webservice, and what it keeps between
//! cycles. `GET /server` allows 200 requests an hour and `GET /failover`
//! 100, so a cycle lists each list it needs at most once, never sooner
//! than [`MIN_GAP`] after the last listing, and a cycle that Node changes
//! brought forward uses the last listing rather than asking again.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{as_servers, RobotClient, RobotCredentials, RobotError};
use crate::config::{AddressKind, Settings};
use crate::hetzner::Server;

/// The least time between two Robot listings: at most 60 of each list an
/// hour, whatever the interval and however often cycles are retried.
pub const MIN_GAP: Duration = Duration::from_secs(60);

/// What a cycle knows of the Robot servers.
#[derive(Debug, Clone, Default)]
pub enum RobotRead {
    /// No pool takes Robot servers: nothing was asked.
    #[default]
    NotNeeded,
    Listed(Arc<RobotListing>),
    /// The listing failed (or the webservice's rules forbid asking now):
    /// the pools with Robot servers stay as they are.
    Failed(RobotError),
}

impl RobotRead {
    /// The Robot servers as pool members; none when not listed.
    pub fn servers(&self) -> &[Server] {
        match self {
            RobotRead::Listed(listing) => &listing.servers,
            _ => &[],
        }
    }

    /// When the Robot servers were listed, if they were.
    pub fn listed_at(&self) -> Option<Instant> {
        match self {
            RobotRead::Listed(listing) => Some(listing.listed_at),
            _ => None,
        }
    }

    pub fn error(&self) -> Option<&RobotError> {
        match self {
            RobotRead::Failed(e) => Some(e),
            _ => None,
        }
    }
}

/// One complete Robot listing.
#[derive(Debug, Clone)]
pub struct RobotListing {
    pub servers: Vec<Server>,
    /// When it was taken: a held removal is confirmed only by a newer one.
    pub listed_at: Instant,
    /// Requests it sent.
    pub requests: u32,
    /// It holds the additional IPs (`GET /ip`) and the failover IPs.
    pub with_ips: bool,
    pub with_failovers: bool,
}

/// Why a cycle runs, as far as the Robot listing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RobotDue {
    /// A periodic, retried, reloaded or new-leader cycle: list (unless the
    /// last listing is younger than [`MIN_GAP`]).
    List,
    /// Node changes brought the cycle forward: use the last listing.
    Reuse,
}

/// Whether a cycle lists Robot again, given when the last listing (or
/// failure) was and how old a listing a Node-triggered cycle may reuse.
pub fn list_due(due: RobotDue, last: Option<Instant>, max_reuse: Duration, now: Instant) -> bool {
    let Some(last) = last else {
        return true;
    };
    let age = now.saturating_duration_since(last);
    if age < MIN_GAP {
        return false;
    }
    match due {
        RobotDue::List => true,
        RobotDue::Reuse => age >= max_reuse,
    }
}

/// The Robot client of the current credentials, and the last listing.
#[derive(Debug)]
pub struct RobotSource {
    endpoint: String,
    timeout: Duration,
    /// The client, and the credentials it was built with: a 401 stops it
    /// for good, so new credentials get a new client.
    client: Option<(RobotCredentials, RobotClient)>,
    last: Option<(Instant, RobotRead)>,
    observer: Option<Arc<dyn super::RobotObserver>>,
}

impl std::fmt::Debug for RobotCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RobotCredentials([redacted])")
    }
}

impl RobotSource {
    pub fn new(endpoint: impl Into<String>, timeout: Duration) -> Self {
        Self {
            endpoint: endpoint.into(),
            timeout,
            client: None,
            last: None,
            observer: None,
        }
    }

    /// Tells `observer` about every Robot request (metrics).
    pub fn with_observer(mut self, observer: Arc<dyn super::RobotObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// What this cycle knows of the Robot servers: the last read when it is
    /// recent enough for `due`, else a new listing (which replaces it,
    /// failed or not: a failure is never hidden behind an older listing).
    pub async fn read(&mut self, settings: &Settings, due: RobotDue) -> RobotRead {
        if !settings.pools.iter().any(|p| p.robot.is_some()) {
            return RobotRead::NotNeeded;
        }
        let now = Instant::now();
        let max_reuse = 2 * settings.interval.max(MIN_GAP);
        let wants = |kind| settings.pools.iter().any(|p| p.wants(kind));
        let (ips, failovers) = (
            wants(AddressKind::RobotAdditionalIp),
            wants(AddressKind::RobotFailoverIp),
        );
        if let Some((at, read)) = &self.last {
            // A reload may ask for a list the last listing did not hold.
            let complete = match read {
                RobotRead::Listed(l) => (l.with_ips || !ips) && (l.with_failovers || !failovers),
                _ => true,
            };
            if complete && !list_due(due, Some(*at), max_reuse, now) {
                return read.clone();
            }
        }
        let read = match self.list(settings, ips, failovers).await {
            Ok(listing) => RobotRead::Listed(Arc::new(listing)),
            Err(e) => RobotRead::Failed(e),
        };
        self.last = Some((now, read.clone()));
        read
    }

    async fn list(
        &mut self,
        settings: &Settings,
        with_ips: bool,
        with_failovers: bool,
    ) -> Result<RobotListing, RobotError> {
        let client = self.client_for(settings).await?;
        let mut requests = 1;
        let servers = client.servers().await?;
        let ips = if with_ips {
            requests += 1;
            client.ips().await?
        } else {
            Vec::new()
        };
        let failovers = if with_failovers {
            requests += 1;
            client.failovers().await?
        } else {
            Vec::new()
        };
        Ok(RobotListing {
            servers: as_servers(servers, &ips, &failovers),
            listed_at: Instant::now(),
            requests,
            with_ips,
            with_failovers,
        })
    }

    /// The client of the credentials as they are now.
    async fn client_for(&mut self, settings: &Settings) -> Result<RobotClient, RobotError> {
        let Some(robot) = &settings.robot else {
            return Err(RobotError::Client {
                reason: "no Robot webservice user is configured".to_owned(),
            });
        };
        let credentials = robot.credentials().await.map_err(|e| RobotError::Client {
            reason: e.to_string(),
        })?;
        if let Some((known, client)) = &self.client {
            if known.user == credentials.user && known.password == credentials.password {
                return Ok(client.clone());
            }
        }
        let client = RobotClient::new(&self.endpoint, &credentials, self.timeout)?
            .with_observer(self.observer.clone());
        self.client = Some((credentials, client.clone()));
        Ok(client)
    }
}
