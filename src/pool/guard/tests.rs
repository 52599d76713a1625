use super::*;
use crate::pool::render::{render, PoolTemplate};

fn ips(range: std::ops::RangeInclusive<u8>) -> Vec<IpAddr> {
    range
        .map(|n| IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, n)))
        .collect()
}

fn set(v: &[IpAddr]) -> BTreeSet<IpAddr> {
    v.iter().copied().collect()
}

fn now() -> Instant {
    Instant::now()
}

#[test]
fn a_removal_of_exactly_the_ratio_is_held() {
    let live = set(&ips(1..=10));
    assert!(matches!(
        shrink_guard(&live, &ips(1..=5), 0.5, None, now(), Duration::ZERO),
        ShrinkVerdict::Hold(_)
    ));
    // One of two servers going away is half the pool: held too.
    assert!(matches!(
        shrink_guard(
            &set(&ips(1..=2)),
            &ips(1..=1),
            0.5,
            None,
            now(),
            Duration::ZERO
        ),
        ShrinkVerdict::Hold(_)
    ));
    // Even a complete replacement is not held when the guard is off.
    assert_eq!(
        shrink_guard(&live, &ips(11..=12), 1.0, None, now(), Duration::ZERO),
        ShrinkVerdict::Proceed
    );
}

#[test]
fn a_hold_is_confirmed_only_after_the_confirmation_delay() {
    let live = set(&ips(1..=10));
    let listed = ips(1..=2);
    let start = now();
    let delay = Duration::from_secs(60);
    let ShrinkVerdict::Hold(held) = shrink_guard(&live, &listed, 0.5, None, start, delay) else {
        panic!("held");
    };
    assert_eq!(held.since, start);
    // A retry a second later (say, after the held write failed) lists
    // the same removal: still held, with the original start.
    let early = start + Duration::from_secs(1);
    assert_eq!(
        shrink_guard(&live, &listed, 0.5, Some(&held), early, delay),
        ShrinkVerdict::Hold(held.clone())
    );
    let later = start + delay;
    assert_eq!(
        shrink_guard(&live, &listed, 0.5, Some(&held), later, delay),
        ShrinkVerdict::Confirmed(held.clone())
    );
}

#[test]
fn an_empty_pool_is_refused_and_says_why() {
    let desired = render(&PoolTemplate::default(), Vec::<IpAddr>::new());
    let servers = ServerCounts {
        matched: 2,
        without_address: 2,
        excluded: 0,
    };
    let refusal = empty_pool_guard(&desired, servers, &[AddressKind::PublicIpv4]).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::EmptyPool {
            matched: 2,
            skipped: 2,
            what: "public IPv4".into(),
            excluded: 0,
        }
    );
    assert_eq!(
        refusal.to_string(),
        "no usable server: Hetzner returned 2 server(s) for the label selector (2 without a \
         usable public IPv4); refusing to write an empty pool, which would take every \
         LoadBalancer IP away"
    );
    // Other kinds are named; servers left out by node rules are counted.
    let servers = ServerCounts {
        excluded: 1,
        ..servers
    };
    let refusal = empty_pool_guard(
        &desired,
        servers,
        &[AddressKind::PublicIpv6, AddressKind::FloatingIp],
    )
    .unwrap_err();
    assert!(
        refusal.to_string().contains(
            "(2 without a usable address of the kinds public-ipv6, floating-ip, 1 left out by \
             node rules)"
        ),
        "{refusal}"
    );
}

#[test]
fn a_pool_with_addresses_passes() {
    let desired = render(
        &PoolTemplate::default(),
        ["1.2.3.4".parse::<IpAddr>().unwrap()],
    );
    let servers = ServerCounts {
        matched: 1,
        ..ServerCounts::default()
    };
    assert_eq!(
        empty_pool_guard(&desired, servers, &[AddressKind::PublicIpv4]),
        Ok(())
    );
}

#[test]
fn small_removals_and_additions_proceed() {
    let live = set(&ips(1..=10));
    assert_eq!(
        shrink_guard(&live, &ips(1..=6), 0.5, None, now(), Duration::ZERO),
        ShrinkVerdict::Proceed
    );
    assert_eq!(
        shrink_guard(&live, &ips(1..=20), 0.5, None, now(), Duration::ZERO),
        ShrinkVerdict::Proceed
    );
    assert_eq!(
        shrink_guard(
            &BTreeSet::new(),
            &ips(1..=3),
            0.0,
            None,
            now(),
            Duration::ZERO
        ),
        ShrinkVerdict::Proceed
    );
}

#[test]
fn a_large_drop_is_held_then_confirmed_by_the_next_listing() {
    let live = set(&ips(1..=40));
    let listed = ips(1..=3);
    let ShrinkVerdict::Hold(held) = shrink_guard(&live, &listed, 0.5, None, now(), Duration::ZERO)
    else {
        panic!("a drop from 40 to 3 must be held");
    };
    assert_eq!(held.addresses, set(&ips(4..=40)));
    assert_eq!(held.pool_size, 40);
    assert!(held.describe().contains("37 of 40"));
    assert_eq!(
        shrink_guard(&live, &listed, 0.5, Some(&held), now(), Duration::ZERO),
        ShrinkVerdict::Confirmed(held.clone())
    );
}

#[test]
fn a_listing_that_changes_its_mind_starts_a_new_hold() {
    let live = set(&ips(1..=40));
    let ShrinkVerdict::Hold(first) =
        shrink_guard(&live, &ips(1..=3), 0.5, None, now(), Duration::ZERO)
    else {
        panic!("held");
    };
    let ShrinkVerdict::Hold(second) =
        shrink_guard(&live, &ips(1..=5), 0.5, Some(&first), now(), Duration::ZERO)
    else {
        panic!("a different removal is held again, not confirmed");
    };
    assert_eq!(second.addresses, set(&ips(6..=40)));
}

#[test]
fn the_ratio_bounds_turn_the_guard_fully_on_or_off() {
    let live = set(&ips(1..=10));
    assert!(matches!(
        shrink_guard(&live, &ips(1..=9), 0.0, None, now(), Duration::ZERO),
        ShrinkVerdict::Hold(_)
    ));
    assert_eq!(
        shrink_guard(&live, &ips(1..=1), 1.0, None, now(), Duration::ZERO),
        ShrinkVerdict::Proceed
    );
}
