use super::held::MANAGER_SLACK;
use super::*;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

fn lease(holder: Option<&str>, renewed_ago: Duration, seconds: i32) -> Lease {
    let renew = SystemTime::now() - renewed_ago;
    Lease {
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(renew.try_into().unwrap())),
            lease_duration_seconds: Some(seconds),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_released_or_expired_lease_is_free() {
    assert!(LeaseView::of(&lease(None, Duration::ZERO, 15)).is_free());
    assert!(LeaseView::of(&lease(Some("a"), Duration::from_secs(20), 15)).is_free());
    assert!(!LeaseView::of(&lease(Some("a"), Duration::from_secs(1), 15)).is_free());
    assert!(LeaseView::default().is_free());
}

#[test]
fn grace_is_a_third_of_the_duration() {
    let config = |secs| LeaseConfig {
        name: "l".into(),
        namespace: "n".into(),
        identity: "i".into(),
        duration: Duration::from_secs(secs),
    };
    assert_eq!(config(15).grace_secs(), 5);
    assert_eq!(config(3).grace_secs(), 1);
    assert_eq!(config(1).duration_secs(), 3);
}

#[test]
fn identity_prefers_the_pod_name() {
    let env = std::collections::HashMap::from([("POD_NAME".to_owned(), "pod-a".to_owned())]);
    assert_eq!(identity(&env), "pod-a");
    let own = identity(&Default::default());
    assert!(own.ends_with(&format!("-{}", std::process::id())), "{own}");
}

const CLOCKS: Clocks = Clocks {
    margin: Duration::from_millis(2500),
    grace: Duration::from_secs(5),
};

/// The Lease renewed `ago` by `holder`, for 15 s.
fn view(holder: Option<&str>, ago: Duration) -> LeaseView {
    LeaseView::of(&lease(holder, ago, 15))
}

/// Claims and reads the Lease renewed just now, then again after the
/// settle time: a term may start.
fn settled(now: SystemTime) -> Held {
    let mut held = Held::default();
    held.claim(&view(Some("me"), Duration::ZERO), "me", now, CLOCKS);
    let again = held.read_due().unwrap();
    held.saw(
        &view(Some("me"), Duration::ZERO),
        "me",
        again,
        CLOCKS,
        Some(again),
    );
    held
}

#[test]
fn a_lease_that_names_us_but_ran_out_starts_no_term_until_a_renewal_is_read_twice() {
    let now = SystemTime::now();
    let mut held = Held::default();
    // A new manager says it holds the Lease: it names us, renewed 14 s ago
    // for 15 s (a term would end in 1 s, less the margin: already over).
    held.claim(
        &view(Some("me"), Duration::from_secs(14)),
        "me",
        now,
        CLOCKS,
    );
    assert_eq!(held.write_deadline(now, CLOCKS.margin), None);
    assert_eq!(
        held.read_due(),
        Some(now + CLOCKS.grace / 8),
        "read again soon"
    );
    // The manager renews; a read shows it. A standby that saw the Lease run
    // out may still be releasing it: read it again a settle time later.
    let seen = held.saw(
        &view(Some("me"), Duration::ZERO),
        "me",
        now,
        CLOCKS,
        Some(now),
    );
    assert_eq!(seen, Seen::Renewed);
    assert_eq!(held.write_deadline(now, CLOCKS.margin), None);
    let settle = now + CLOCKS.grace / 4;
    assert_eq!(held.read_due(), Some(settle));
    // Still ours then: writes until 15 s after the renewal, less the margin.
    let seen = held.saw(
        &view(Some("me"), Duration::ZERO),
        "me",
        settle,
        CLOCKS,
        Some(settle),
    );
    assert!(matches!(seen, Seen::Same | Seen::Renewed), "{seen:?}");
    let deadline = held.write_deadline(settle, CLOCKS.margin).expect("settled");
    let left = deadline.duration_since(now).unwrap();
    assert!(
        left > Duration::from_secs(12) && left < Duration::from_secs(13),
        "{left:?}"
    );
}

#[test]
fn a_release_that_lands_after_our_renewal_is_seen_before_any_write() {
    let now = SystemTime::now();
    let mut held = Held::default();
    held.claim(
        &view(Some("me"), Duration::from_secs(20)),
        "me",
        now,
        CLOCKS,
    );
    held.saw(
        &view(Some("me"), Duration::ZERO),
        "me",
        now,
        CLOCKS,
        Some(now),
    );
    let settle = held.read_due().unwrap();
    // The standby's forced release: nobody holds it at the second read.
    assert_eq!(
        held.saw(
            &view(None, Duration::ZERO),
            "me",
            settle,
            CLOCKS,
            Some(settle)
        ),
        Seen::Gone
    );
    assert_eq!(held.write_deadline(settle, CLOCKS.margin), None);
    // Or it took it already.
    let mut held = Held::default();
    held.claim(&view(Some("me"), Duration::ZERO), "me", now, CLOCKS);
    let settle = held.read_due().unwrap();
    assert_eq!(
        held.saw(
            &view(Some("standby"), Duration::ZERO),
            "me",
            settle,
            CLOCKS,
            Some(settle)
        ),
        Seen::Taken("standby".into())
    );
    assert_eq!(held.write_deadline(settle, CLOCKS.margin), None);
}

#[test]
fn a_leader_reads_the_lease_after_each_renewal_and_steps_down_without_one() {
    let now = SystemTime::now();
    let mut held = settled(now);
    held.leading = true;
    let valid_until = held.valid_until.unwrap();
    // The manager renews 5 s (grace) before the end: read 1.25 s after that.
    let renewal = valid_until - CLOCKS.grace;
    assert_eq!(held.read_due(), Some(renewal + CLOCKS.grace / 4));
    // That read shows no newer renewal: read again a step later, and the
    // leader steps down at the margin unless one comes.
    let later = renewal + CLOCKS.grace / 4;
    let old = view(Some("me"), Duration::from_secs(10));
    assert_eq!(held.saw(&old, "me", later, CLOCKS, Some(later)), Seen::Same);
    assert_eq!(held.read_due(), Some(later + CLOCKS.grace / 8));
    assert_eq!(
        held.step_down(CLOCKS.margin),
        Some(valid_until - CLOCKS.margin)
    );
    // An older renewal (a late watch event) never shortens the term.
    held.saw(
        &view(Some("me"), Duration::from_secs(3)),
        "me",
        later,
        CLOCKS,
        None,
    );
    assert_eq!(held.valid_until, Some(valid_until));
}

#[test]
fn another_holder_or_none_ends_the_hold_and_a_standby_reads_nothing() {
    let now = SystemTime::now();
    let mut held = Held::default();
    assert_eq!(held.read_due(), None, "a standby does not read the Lease");
    let other = view(Some("other"), Duration::ZERO);
    assert_eq!(held.saw(&other, "me", now, CLOCKS, None), Seen::Same);
    let mut held = settled(now);
    assert_eq!(
        held.saw(&other, "me", now, CLOCKS, Some(now)),
        Seen::Taken("other".into())
    );
    assert_eq!(
        held.saw(&view(None, Duration::ZERO), "me", now, CLOCKS, Some(now)),
        Seen::Gone
    );
    held.unclaim();
    assert_eq!(held.write_deadline(now, CLOCKS.margin), None);
    assert_eq!(held.step_down(CLOCKS.margin), None);
}

/// A renewal read while settling that runs out before the settle read:
/// the next renewal read starts the settle afresh (it may have revived a
/// Lease a standby is releasing), and reads stay a step apart meanwhile.
#[test]
fn a_renewal_that_runs_out_while_settling_settles_nothing() {
    let now = SystemTime::now();
    let mut held = Held::default();
    // Renewed 12 s ago for 15 s: valid for 0.5 s more (less the margin).
    let old = view(Some("me"), Duration::from_secs(12));
    held.claim(&old, "me", now, CLOCKS);
    assert_eq!(held.read_due(), Some(now + CLOCKS.grace / 4), "settle read");
    // The settle read comes after that renewal ran out (no newer one yet).
    let late = now + Duration::from_secs(2);
    assert_eq!(held.saw(&old, "me", late, CLOCKS, Some(late)), Seen::Same);
    assert_eq!(held.write_deadline(late, CLOCKS.margin), None);
    assert_eq!(
        held.read_due(),
        Some(late + CLOCKS.grace / 8),
        "a step, not at once"
    );
    // The renewal comes: it is read twice, a settle time apart, first.
    let fresh = view(Some("me"), Duration::ZERO);
    let later = late + Duration::from_millis(300);
    assert_eq!(
        held.saw(&fresh, "me", later, CLOCKS, Some(later)),
        Seen::Renewed
    );
    assert_eq!(
        held.write_deadline(later, CLOCKS.margin),
        None,
        "not settled yet"
    );
    let settle = held.read_due().unwrap();
    assert_eq!(settle, later + CLOCKS.grace / 4);
    held.saw(&fresh, "me", settle, CLOCKS, Some(settle));
    assert!(held.write_deadline(settle, CLOCKS.margin).is_some());
}

/// An answer to a GET sent before the settle time, or a watch event, shows
/// the Lease as it may have been then: neither settles a claim.
#[test]
fn only_a_read_sent_after_the_settle_time_settles_a_claim() {
    let now = SystemTime::now();
    let mut held = Held::default();
    let fresh = view(Some("me"), Duration::ZERO);
    held.claim(&fresh, "me", now, CLOCKS);
    let settle = held.read_due().unwrap();
    let after = settle + Duration::from_millis(10);
    held.saw(
        &fresh,
        "me",
        after,
        CLOCKS,
        Some(settle - Duration::from_millis(1)),
    );
    assert_eq!(
        held.write_deadline(after, CLOCKS.margin),
        None,
        "sent too early"
    );
    held.saw(&fresh, "me", after, CLOCKS, None);
    assert_eq!(
        held.write_deadline(after, CLOCKS.margin),
        None,
        "a watch event"
    );
    held.saw(&fresh, "me", after, CLOCKS, Some(settle));
    assert!(held.write_deadline(after, CLOCKS.margin).is_some());
}

#[test]
fn a_standby_starts_over_when_a_lease_that_ran_out_is_not_taken_in_time() {
    let since = SystemTime::now();
    let slack = CLOCKS.grace + MANAGER_SLACK;
    let standby = Held::default();
    // A live leader renewed 2 s ago: the moment follows its expiry.
    let live = view(Some("other"), Duration::from_secs(2));
    let expires = live.expires.unwrap();
    assert_eq!(
        standby.stuck_after(&live, since, CLOCKS),
        Some(expires + slack)
    );
    // Seen running out a minute ago (a watch that went quiet), or never
    // seen: counted from when it became a standby.
    let old = view(Some("other"), Duration::from_secs(60));
    assert_eq!(
        standby.stuck_after(&old, since, CLOCKS),
        Some(since + slack)
    );
    assert_eq!(
        standby.stuck_after(&LeaseView::default(), since, CLOCKS),
        Some(since + slack)
    );
}

#[test]
fn a_claim_that_never_settles_starts_over_and_a_term_never_does() {
    let now = SystemTime::now();
    let slack = CLOCKS.grace + MANAGER_SLACK;
    // Claimed with a renewal of ours read, which then ran out unsettled
    // (the manager's next renewal hangs): the watch shows nothing newer.
    let mut held = Held::default();
    let renewed = view(Some("me"), Duration::from_secs(1));
    held.claim(&renewed, "me", now, CLOCKS);
    assert!(held.claimed && !held.leading);
    let valid_until = held.valid_until.expect("the renewal read");
    assert_eq!(
        held.stuck_after(&renewed, now, CLOCKS),
        Some(valid_until + slack)
    );
    // Claimed, nothing read yet: from the claim.
    let mut unread = Held::default();
    unread.claim(&LeaseView::default(), "me", now, CLOCKS);
    assert_eq!(
        unread.stuck_after(&LeaseView::default(), now, CLOCKS),
        Some(now + slack)
    );
    // Leading: the step-down bounds it instead.
    let mut leading = settled(now);
    leading.leading = true;
    assert_eq!(leading.stuck_after(&renewed, now, CLOCKS), None);
}
