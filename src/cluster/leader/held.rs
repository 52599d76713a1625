//! What a replica knows of its own hold on the Lease, decided without I/O:
//! a term starts only once reads of the Lease (the watch or a GET) show
//! this replica's renewal still valid twice, a settle time apart; it lasts
//! while renewals are read, and ends `margin` before the last one read
//! runs out. The watch is not
//! needed: while the manager holds the Lease the election reads it itself
//! right after each renewal is due.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;

/// The Lease as last read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LeaseView {
    pub(super) holder: Option<String>,
    /// renewTime + leaseDurationSeconds.
    pub(super) expires: Option<SystemTime>,
}

impl LeaseView {
    pub(super) fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        let expires = match (spec.renew_time, spec.lease_duration_seconds) {
            (Some(renew), Some(seconds)) => {
                let renew: SystemTime = renew.0.into();
                renew.checked_add(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
            }
            _ => None,
        };
        Self {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            expires,
        }
    }

    /// Free to take: released, or not renewed in time.
    pub(super) fn is_free(&self) -> bool {
        self.holder.is_none() || self.expires.is_none_or(|e| e <= SystemTime::now())
    }
}

/// How long past the moment its manager should have acted the election
/// waits before starting over: taking a Lease that ran out takes the
/// library nine calls in a row (and a conflict's back-off), so a slow API
/// server (3 s a call) still gets through; the client's connect limit is
/// 30 s too.
pub(super) const MANAGER_SLACK: Duration = Duration::from_secs(30);

/// The clocks of holding: how long before the last renewal runs out writes
/// stop (`margin`), and how long before it the manager renews (`grace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Clocks {
    pub(super) margin: Duration,
    pub(super) grace: Duration,
}

impl Clocks {
    /// Between two reads of the Lease while a renewal is awaited.
    fn step(self) -> Duration {
        (self.grace / 8).max(Duration::from_millis(100))
    }

    /// How long after the first renewal of a claim is read a second read
    /// must still show it before a term starts: a standby that saw the
    /// Lease run out under its last holder releases it by force (without
    /// looking again), and that release may land just after our renewal.
    fn settle(self) -> Duration {
        (self.grace / 4).max(Duration::from_millis(250))
    }
}

/// What a read of the Lease means for the holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// Nothing changes (an older or the same renewal, or not claimed).
    Same,
    /// A newer renewal of ours: the term may go on (or start) until the
    /// new deadline.
    Renewed,
    /// Another replica holds it: stand by and start over.
    Taken(String),
    /// Released or deleted under us: stand by and start over (a new
    /// manager takes a free Lease at once).
    Gone,
}

/// This replica's hold under one manager.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Held {
    /// The manager says it holds the Lease.
    pub(super) claimed: bool,
    /// A term is published.
    pub(super) leading: bool,
    /// renewTime + duration of the newest renewal of ours read while
    /// claimed; `None` until one is read.
    pub(super) valid_until: Option<SystemTime>,
    /// When the election reads the Lease next (while claimed).
    pub(super) read_at: Option<SystemTime>,
    /// A claim's first renewal read must be read again, still ours, at or
    /// after this moment before a term starts (`None`: not read yet).
    settle_until: Option<SystemTime>,
    /// The claim has not settled yet.
    settling: bool,
}

impl Held {
    /// The manager took the Lease at `now`: it is read at once unless
    /// `view` (the watch) already shows a renewal of ours.
    pub(super) fn claim(
        &mut self,
        view: &LeaseView,
        identity: &str,
        now: SystemTime,
        clocks: Clocks,
    ) {
        *self = Held {
            claimed: true,
            leading: false,
            valid_until: None,
            read_at: Some(now),
            settle_until: None,
            settling: true,
        };
        self.saw(view, identity, now, clocks, None);
    }

    /// The manager let the Lease go.
    pub(super) fn unclaim(&mut self) {
        *self = Held::default();
    }

    /// The Lease as seen at `now`: by a GET of the election sent at `read`,
    /// or (`None`) by the watch. Keeps the newest renewal of ours and when
    /// to read next; only a GET sent at or after the settle time settles a
    /// claim (a late answer or watch event may show the Lease as it was).
    pub(super) fn saw(
        &mut self,
        view: &LeaseView,
        identity: &str,
        now: SystemTime,
        clocks: Clocks,
        read: Option<SystemTime>,
    ) -> Seen {
        if !self.claimed {
            return Seen::Same;
        }
        let seen = match view.holder.as_deref() {
            Some(holder) if holder == identity => match view.expires {
                Some(expires) if self.valid_until.is_none_or(|v| expires > v) => {
                    self.valid_until = Some(expires);
                    Seen::Renewed
                }
                _ => Seen::Same,
            },
            Some(other) => return Seen::Taken(other.to_owned()),
            None => return Seen::Gone,
        };
        self.settle(now, read, clocks);
        if read.is_some() || seen == Seen::Renewed {
            self.read_at = Some(self.next_read(now, clocks));
        }
        seen
    }

    /// The Lease seen at `now` (by a GET sent at `read`) shows a valid
    /// renewal of ours: the first one of a claim sets when to read it
    /// again; a GET sent at or after that settles the claim.
    fn settle(&mut self, now: SystemTime, read: Option<SystemTime>, clocks: Clocks) {
        let valid = self
            .valid_until
            .is_some_and(|until| until.checked_sub(clocks.margin).is_some_and(|d| d > now));
        if !self.settling {
            return;
        }
        if !valid {
            // The renewal read ran out before the claim settled: the next
            // one read starts the settle afresh.
            self.settle_until = None;
            return;
        }
        match self.settle_until {
            None => self.settle_until = Some(now + clocks.settle()),
            Some(until) if read.is_some_and(|sent| sent >= until) => self.settling = false,
            Some(_) => {}
        }
    }

    /// After a read at `now`: a quarter of the grace after the next
    /// renewal is due, or a step later while it is overdue (or none was
    /// read yet).
    fn next_read(&self, now: SystemTime, clocks: Clocks) -> SystemTime {
        let step = now + clocks.step();
        if self.settling {
            if let Some(until) = self.settle_until.filter(|until| *until > now) {
                return until;
            }
        }
        let Some(valid_until) = self.valid_until else {
            return step;
        };
        let due = valid_until
            .checked_sub(clocks.grace)
            .map_or(step, |renewal| renewal + clocks.grace / 4);
        due.max(step)
    }

    /// When the election reads the Lease next; `None` while not claimed.
    pub(super) fn read_due(&self) -> Option<SystemTime> {
        if self.claimed {
            self.read_at
        } else {
            None
        }
    }

    /// Until when this replica may write: `margin` before its newest
    /// renewal read runs out; `None` when it may not (not claimed, no
    /// renewal read, or it has run out by `now`).
    pub(super) fn write_deadline(&self, now: SystemTime, margin: Duration) -> Option<SystemTime> {
        if !self.claimed || self.settling {
            return None;
        }
        let until = self.valid_until?;
        let deadline = until.checked_sub(margin).unwrap_or(until);
        (deadline > now).then_some(deadline)
    }

    /// When the election gives up on its manager and starts over with a
    /// new one, `None` while leading (stepping down covers that). The
    /// manager should have acted by then: taken a Lease that ran out (as
    /// `view` last showed it), or, holding a claim that has not settled,
    /// renewed before our newest renewal read ran out; counted from `since`
    /// (when this replica last became a standby or claimed) when that was
    /// later, or nothing was seen. Past `grace` and [`MANAGER_SLACK`] more,
    /// one of its calls hangs (the client sets no read timeout). While the
    /// watch shows a live leader's renewals, the moment keeps moving ahead.
    pub(super) fn stuck_after(
        &self,
        view: &LeaseView,
        since: SystemTime,
        clocks: Clocks,
    ) -> Option<SystemTime> {
        if self.leading {
            return None;
        }
        let due = if self.claimed {
            self.valid_until
        } else {
            view.expires
        };
        Some(due.map_or(since, |due| due.max(since)) + clocks.grace + MANAGER_SLACK)
    }

    /// When a leader steps down unless a renewal is read first.
    pub(super) fn step_down(&self, margin: Duration) -> Option<SystemTime> {
        if !self.leading {
            return None;
        }
        let until = self.valid_until?;
        Some(until.checked_sub(margin).unwrap_or(until))
    }
}
