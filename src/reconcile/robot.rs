//! When a cycle lists the Robot webservice, and what it keeps between
//! cycles. `GET /server` allows 200 requests an hour and `GET /failover`
//! 100, so a cycle lists each list it needs at most once, never sooner
//! than [`MIN_GAP`] after the last listing, and a cycle that Node changes
//! brought forward uses the last answer while it is younger than the
//! interval.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::RobotRef;
use crate::config::{AddressKind, Settings};
use crate::robot::{as_servers, RobotClient, RobotCredentials, RobotError, RobotList};
use crate::server::Server;

/// The least time between two Robot listings: at most 60 of each list an
/// hour, whatever the interval and however often cycles are retried.
pub const MIN_GAP: Duration = Duration::from_secs(60);

/// The longest a Robot listing (every list it needs) may take: it runs
/// beside the Cloud listing, so a stalled webservice fails the pools with
/// Robot servers and holds back no other.
pub const TIME_LIMIT: Duration = Duration::from_secs(60);

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
    /// It holds the failover IPs (`GET /failover`).
    pub with_failovers: bool,
}

/// Why a cycle runs, as far as the Robot listing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RobotDue {
    /// A periodic, retried, reloaded, new-leader or health-clock cycle:
    /// list (unless the last listing is younger than the least gap).
    List,
    /// Node changes brought the cycle forward: use the last answer.
    Reuse,
}

/// Whether a cycle lists Robot again, given when the last listing (or
/// failure) was, if any. A Node-triggered cycle reuses an answer younger
/// than `max_reuse` (the interval): Node changes that keep coming take the
/// periodic cycle's place, and then list as it would have.
pub(super) fn list_due(
    due: RobotDue,
    last: Option<Instant>,
    (min_gap, max_reuse): (Duration, Duration),
    now: Instant,
) -> bool {
    let Some(last) = last else {
        return true;
    };
    let age = now.saturating_duration_since(last);
    match due {
        RobotDue::Reuse => age >= max_reuse.max(min_gap),
        RobotDue::List => age >= min_gap,
    }
}

/// The Robot client of the current credentials, and the last listing.
#[derive(Debug)]
pub struct RobotSource {
    endpoint: String,
    timeout: Duration,
    min_gap: Duration,
    time_limit: Duration,
    /// The client, and the credentials it was built with: a 401 stops it
    /// for good, so new credentials get a new client.
    client: Option<(RobotCredentials, RobotClient)>,
    /// When the last listing started, and its answer: `None` once a new
    /// leadership term began (the answer is not used in it, but the time
    /// still keeps the least gap).
    last: Option<(Instant, Option<RobotRead>)>,
    observer: Option<Arc<dyn crate::robot::RobotObserver>>,
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
            min_gap: MIN_GAP,
            time_limit: TIME_LIMIT,
            client: None,
            last: None,
            observer: None,
        }
    }

    /// Another time limit for a listing ([`TIME_LIMIT`] unless set): for
    /// tests of a stalled webservice.
    pub fn with_time_limit(mut self, time_limit: Duration) -> Self {
        self.time_limit = time_limit;
        self
    }

    /// Another least gap between two listings ([`MIN_GAP`] unless set):
    /// for tests that need a second listing at once.
    pub fn with_min_gap(mut self, min_gap: Duration) -> Self {
        self.min_gap = min_gap;
        self
    }

    /// Tells `observer` about every Robot request (metrics).
    pub fn with_observer(mut self, observer: Arc<dyn crate::robot::RobotObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// A new leadership term began (or this one ended): the last answer is
    /// not used again, since another replica may have written the pools
    /// since it was read. The client (its 401 and rate limits) and the time
    /// of the last listing stay: the next listing still waits the least gap.
    pub fn new_term(&mut self) {
        if let Some((_, answer)) = &mut self.last {
            *answer = None;
        }
    }

    /// What this cycle knows of the Robot servers: the last read when it is
    /// recent enough for `due`, else a new listing (which replaces it,
    /// failed or not: a failure is never hidden behind an older listing).
    /// In a new term, nothing until the least gap since the last listing
    /// is over.
    pub async fn read(&mut self, settings: &Settings, due: RobotDue) -> RobotRead {
        if !settings.pools.iter().any(|p| p.robot.is_some()) {
            return RobotRead::NotNeeded;
        }
        let now = Instant::now();
        let failovers = settings
            .pools
            .iter()
            .any(|p| p.wants(AddressKind::RobotFailoverIp));
        match &self.last {
            Some((at, None)) => {
                let age = now.saturating_duration_since(*at);
                if age < self.min_gap {
                    let wait = self.min_gap - age;
                    return RobotRead::Failed(RobotError::Waiting {
                        seconds: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                    });
                }
            }
            Some((at, Some(read))) => {
                // A reload may ask for a list the last listing did not hold.
                let complete = match read {
                    RobotRead::Listed(l) => l.with_failovers || !failovers,
                    _ => true,
                };
                let gaps = (self.min_gap, settings.interval);
                if complete && !list_due(due, Some(*at), gaps, now) {
                    return read.clone();
                }
            }
            None => {}
        }
        // Until it finishes, this listing counts as one without an answer:
        // a read cut off in the middle (a reload drops the read in flight)
        // does not let the next one ask at once, and tells it to wait.
        let limit = self.time_limit;
        self.last = Some((now, None));
        let listing = tokio::time::timeout(limit, self.list(settings, failovers));
        let read = match listing.await {
            Ok(Ok(listing)) => {
                warn_unknown(settings, &listing.servers);
                RobotRead::Listed(Arc::new(listing))
            }
            Ok(Err(e)) => RobotRead::Failed(e),
            Err(_) => RobotRead::Failed(RobotError::TimedOut {
                seconds: limit.as_secs(),
            }),
        };
        self.last = Some((now, Some(read.clone())));
        read
    }

    /// One listing: `/server` and `/ip` (whose `locked` also tells of the
    /// main IPs), and `/failover` when a pool takes failover IPs. Nothing
    /// is sent while the webservice's rules hold back any list it needs: a
    /// listing that cannot finish spends no request.
    async fn list(
        &mut self,
        settings: &Settings,
        with_failovers: bool,
    ) -> Result<RobotListing, RobotError> {
        let client = self.client_for(settings).await?;
        let mut lists = vec![RobotList::Servers, RobotList::Ips];
        if with_failovers {
            lists.push(RobotList::Failovers);
        }
        if let Some(error) = lists.iter().find_map(|list| client.forbidden(*list)) {
            return Err(error);
        }
        let servers = client.servers().await?;
        let ips = client.ips().await?;
        let failovers = if with_failovers {
            client.failovers().await?
        } else {
            Vec::new()
        };
        Ok(RobotListing {
            servers: as_servers(servers, &ips, &failovers),
            listed_at: Instant::now(),
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
        let credentials = robot.credentials().await?;
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

/// Warns about each `Robot.Servers` entry that names no server of the
/// account (a typo, or a server cancelled): it gives its pool nothing.
fn warn_unknown(settings: &Settings, servers: &[Server]) {
    for pool in &settings.pools {
        let Some(robot) = &pool.robot else { continue };
        for wanted in &robot.servers {
            let known = servers.iter().any(|s| {
                s.robot_number()
                    .is_some_and(|number| wanted.names(number, &s.name))
            });
            if !known {
                let wanted = match wanted {
                    RobotRef::Number(n) => n.to_string(),
                    RobotRef::Name(name) => name.clone(),
                };
                tracing::warn!(
                    pool = %pool.name,
                    server = %wanted,
                    "Robot.Servers names no server of the Robot account; it gives the pool nothing"
                );
            }
        }
    }
}

/// A password file that cannot be read: the client cannot be built.
impl From<crate::config::RobotPasswordError> for RobotError {
    fn from(error: crate::config::RobotPasswordError) -> Self {
        RobotError::Client {
            reason: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn robot_is_listed_at_most_once_a_minute_and_node_changes_reuse_an_answer_younger_than_the_interval(
    ) {
        let now = Instant::now() + Duration::from_secs(7200);
        let gaps = (MIN_GAP, Duration::from_secs(900));
        assert!(list_due(RobotDue::List, None, gaps, now), "never listed");
        assert!(
            list_due(RobotDue::Reuse, None, gaps, now),
            "nothing to reuse"
        );
        let just = now - (MIN_GAP - Duration::from_secs(1));
        assert!(
            !list_due(RobotDue::List, Some(just), gaps, now),
            "a retry within a minute"
        );
        let minute = now - MIN_GAP;
        assert!(list_due(RobotDue::List, Some(minute), gaps, now));
        let recent = now - Duration::from_secs(899);
        assert!(
            !list_due(RobotDue::Reuse, Some(recent), gaps, now),
            "a Node change uses an answer younger than the interval"
        );
        let old = now - Duration::from_secs(900);
        assert!(
            list_due(RobotDue::Reuse, Some(old), gaps, now),
            "Node changes that keep coming list as the periodic cycle would have"
        );
        let short = (MIN_GAP, Duration::from_secs(1));
        assert!(
            !list_due(RobotDue::Reuse, Some(just), short, now),
            "never sooner than the least gap"
        );
    }
}
