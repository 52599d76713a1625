use std::time::Duration;

use tokio::time::Instant;

use super::{plan, FloatingIpState, Member, Move, MoveBudget, MoveReason, Plan};

fn member(server: i64, location: &str) -> Member {
    let network_zone = match location {
        "ash" => "us-east",
        "hil" => "us-west",
        _ => "eu-central",
    };
    Member {
        server,
        location: location.to_owned(),
        network_zone: network_zone.to_owned(),
        keeps: true,
        takes_new: true,
        lease_late: false,
    }
}

fn fip(id: i64, home: &str, holder: Option<i64>) -> FloatingIpState {
    FloatingIpState {
        id,
        home_location: home.to_owned(),
        home_zone: member(0, home).network_zone,
        holder,
        moving_to: None,
        skipped: Vec::new(),
    }
}

#[test]
fn a_floating_ip_stays_with_a_healthy_holder_even_when_another_ranks_higher() {
    // Its holder is in another location and holds more IPs: no rebalancing.
    let members = [member(1, "fsn1"), member(2, "nbg1")];
    let fips = [fip(10, "fsn1", Some(2)), fip(11, "fsn1", Some(2))];
    assert_eq!(plan(&fips, &members, 10), Plan::default());
}

#[test]
fn an_ip_whose_holder_left_goes_to_its_home_location_then_its_zone() {
    let members = [member(1, "ash"), member(2, "nbg1"), member(3, "fsn1")];
    let fips = [fip(10, "fsn1", Some(99))];
    let moved = plan(&fips, &members, 10).moves;
    assert_eq!(
        moved,
        vec![Move {
            floating_ip: 10,
            from: Some(99),
            to: 3,
            reason: MoveReason::HolderLeft,
        }]
    );
    // Without a member at home, one in the same network zone.
    let members = [member(1, "ash"), member(2, "nbg1")];
    assert_eq!(plan(&fips, &members, 10).moves[0].to, 2);
}

/// Hetzner assigns a Floating IP only to a server in its network zone:
/// without a member there, the IP is stranded, never sent across zones.
#[test]
fn an_ip_never_goes_to_another_network_zone() {
    let fips = [fip(10, "fsn1", Some(99)), fip(11, "ash", None)];
    let members = [member(1, "ash"), member(2, "hil")];
    let got = plan(&fips, &members, 10);
    assert_eq!(got.stranded, vec![10], "{got:?}");
    assert_eq!(
        got.moves
            .iter()
            .map(|m| (m.floating_ip, m.to))
            .collect::<Vec<_>>(),
        [(11, 1)]
    );
}

/// A zone the listing did not name rules nothing out (it only ranks).
#[test]
fn an_unknown_network_zone_rules_no_member_out() {
    let mut unknown = fip(10, "fsn1", Some(99));
    unknown.home_zone = String::new();
    assert_eq!(plan(&[unknown], &[member(1, "ash")], 10).moves[0].to, 1);
    let mut zoneless = member(1, "ash");
    zoneless.network_zone = String::new();
    assert_eq!(
        plan(&[fip(10, "fsn1", Some(99))], &[zoneless], 10).moves[0].to,
        1
    );
}

#[test]
fn unassigned_ips_spread_over_the_members_holding_the_fewest() {
    let members = [member(1, "fsn1"), member(2, "fsn1"), member(3, "fsn1")];
    let fips: Vec<_> = (10..16)
        .map(|id| fip(id, "fsn1", None))
        .chain([fip(20, "fsn1", Some(1)), fip(21, "fsn1", Some(1))])
        .collect();
    let plan = plan(&fips, &members, 10);
    assert!(plan
        .moves
        .iter()
        .all(|m| m.reason == MoveReason::Unassigned && m.from.is_none()));
    let new = |server| plan.moves.iter().filter(|m| m.to == server).count();
    // Member 1 already holds two: the first four new ones go to the others,
    // and then every member ends with two or three.
    assert_eq!(plan.moves.len(), 6);
    assert!(plan.moves[..4].iter().all(|m| m.to != 1), "{plan:?}");
    let held = [2 + new(1), new(2), new(3)];
    assert!(held.iter().all(|n| (2..=3).contains(n)), "{held:?}");
}

#[test]
fn the_choice_is_the_same_whatever_the_order_of_the_input() {
    let members = [member(1, "fsn1"), member(2, "fsn1"), member(3, "fsn1")];
    let fips = [
        fip(12, "fsn1", None),
        fip(10, "fsn1", Some(7)),
        fip(11, "fsn1", None),
    ];
    let first = plan(&fips, &members, 10);
    let mut members_reversed = members.to_vec();
    members_reversed.reverse();
    let mut fips_reversed = fips.to_vec();
    fips_reversed.reverse();
    assert_eq!(plan(&fips_reversed, &members_reversed, 10), first);
    assert_eq!(
        first
            .moves
            .iter()
            .map(|m| m.floating_ip)
            .collect::<Vec<_>>(),
        [10, 11, 12]
    );
}

#[test]
fn without_a_healthy_member_the_ip_stays_where_it_is_and_is_reported() {
    let fips = [fip(10, "fsn1", Some(1)), fip(11, "fsn1", None)];
    let plan = plan(&fips, &[], 10);
    assert!(plan.moves.is_empty());
    assert_eq!(plan.stranded, vec![10, 11]);
}

#[test]
fn moves_past_the_budget_wait_and_are_reported() {
    let members = [member(1, "fsn1")];
    let fips: Vec<_> = (10..14).map(|id| fip(id, "fsn1", Some(99))).collect();
    let plan = plan(&fips, &members, 2);
    assert_eq!(
        plan.moves.iter().map(|m| m.floating_ip).collect::<Vec<_>>(),
        [10, 11]
    );
    assert_eq!(plan.deferred, vec![12, 13]);
}

#[test]
fn the_budget_allows_a_few_moves_a_window() {
    let t0 = Instant::now();
    let window = Duration::from_secs(60);
    let mut budget = MoveBudget::new(2, window);
    assert_eq!(budget.allowed(t0), 2);
    budget.spend(t0);
    budget.spend(t0 + Duration::from_secs(10));
    assert_eq!(budget.allowed(t0 + Duration::from_secs(20)), 0);
    assert_eq!(
        budget.next_allowed(t0 + Duration::from_secs(20)),
        Some(t0 + window)
    );
    assert_eq!(budget.allowed(t0 + window), 1);
    assert_eq!(budget.next_allowed(t0 + window), None);
    assert_eq!(budget.allowed(t0 + window + Duration::from_secs(10)), 2);
}

#[test]
fn the_hash_is_fnv_1a_so_every_replica_agrees() {
    assert_eq!(super::stable_hash(1, 2), 0x7717_9803_63c8_e066);
}

#[test]
fn a_budget_of_none_never_allows_a_move() {
    let t0 = Instant::now();
    let mut budget = MoveBudget::new(0, Duration::from_secs(60));
    assert_eq!(budget.allowed(t0), 0);
    assert!(budget.next_allowed(t0).is_some(), "None would mean: now");
}

#[test]
fn an_ip_on_its_way_to_a_member_is_not_planned_again() {
    // Moving 10 from 99 to 1 runs; 2 joined and would rank higher.
    let members = [member(1, "nbg1"), member(2, "fsn1")];
    let mut moving = fip(10, "fsn1", Some(99));
    moving.moving_to = Some(1);
    assert_eq!(plan(&[moving.clone()], &members, 10), Plan::default());
    // Its target left too: still left alone until the move ended (two
    // moves of one IP at once would race; the next look plans anew).
    assert_eq!(plan(&[moving], &members[1..], 10), Plan::default());
}

#[test]
fn a_member_that_may_only_keep_keeps_its_ips_and_gets_no_new_one() {
    // Server 3 (at home) may keep what it holds (its Node turned NotReady
    // a moment ago) but takes nothing new; the other IP goes elsewhere.
    let mut keeper = member(3, "fsn1");
    keeper.takes_new = false;
    let members = [keeper, member(2, "nbg1")];
    let fips = [fip(10, "fsn1", Some(3)), fip(11, "fsn1", Some(99))];
    let got = plan(&fips, &members, 10);
    assert_eq!(got.moves.len(), 1, "{got:?}");
    assert_eq!((got.moves[0].floating_ip, got.moves[0].to), (11, 2));
    // Only keepers: the IP is stranded, not given to one.
    let mut only = member(3, "fsn1");
    only.takes_new = false;
    let got = plan(&[fip(11, "fsn1", Some(99))], &[only], 10);
    assert_eq!(got.stranded, vec![11]);
}

#[test]
fn an_ip_whose_move_runs_is_left_alone_and_counts_for_its_target() {
    // IP 10 is on its way to 3 (3 may even have left since): not planned
    // again. IP 11 needs a member: 3 already gets one, so 2 takes it.
    let members = [member(2, "fsn1"), member(3, "fsn1")];
    let mut moving = fip(10, "fsn1", Some(99));
    moving.moving_to = Some(3);
    let got = plan(&[moving.clone(), fip(11, "fsn1", Some(99))], &members, 10);
    assert_eq!(got.moves.len(), 1, "{got:?}");
    assert_eq!((got.moves[0].floating_ip, got.moves[0].to), (11, 2));
    moving.moving_to = Some(98);
    assert_eq!(plan(&[moving], &members, 10), Plan::default());
}

#[test]
fn a_resized_budget_keeps_the_moves_of_its_window() {
    let t0 = Instant::now();
    let mut budget = MoveBudget::new(3, Duration::from_secs(60));
    budget.spend(t0);
    budget.spend(t0);
    budget.resize(5);
    assert_eq!(budget.max(), 5);
    assert_eq!(budget.allowed(t0 + Duration::from_secs(1)), 3);
    budget.resize(1);
    assert_eq!(budget.allowed(t0 + Duration::from_secs(1)), 0);
    // The two moves leave the window a minute after they started.
    assert_eq!(budget.allowed(t0 + Duration::from_secs(60)), 1);
}

/// A server Hetzner refused the IP to since the last listing is not
/// asked again: the next member, or stranded when none is left.
#[test]
fn a_refused_member_is_skipped_and_without_another_the_ip_is_stranded() {
    let members = [member(1, "fsn1"), member(2, "fsn1")];
    let mut refused = fip(10, "fsn1", Some(99));
    refused.skipped = vec![1];
    assert_eq!(plan(&[refused.clone()], &members, 10).moves[0].to, 2);
    refused.skipped = vec![1, 2];
    let got = plan(&[refused], &members, 10);
    assert!(got.moves.is_empty(), "{got:?}");
    assert_eq!(got.stranded, vec![10]);
}

/// A member the Lease watch saw renewing lately ranks before one it did
/// not (whatever the location); a late one is still a target when no
/// other is (the move reads its Lease fresh first).
#[test]
fn a_member_seen_renewing_ranks_before_a_late_one() {
    let late_home = Member {
        lease_late: true,
        ..member(1, "fsn1")
    };
    let fresh_away = member(2, "nbg1");
    let fips = [fip(10, "fsn1", Some(99))];
    assert_eq!(
        plan(&fips, &[late_home.clone(), fresh_away], 10).moves[0].to,
        2
    );
    assert_eq!(plan(&fips, &[late_home], 10).moves[0].to, 1);
}

/// A member the Lease watch calls silent keeps nothing (its IPs move) but
/// may be a target, last, and never for the IP it holds.
#[test]
fn a_silent_member_keeps_nothing_but_may_take_another_ip() {
    let silent = |server| Member {
        keeps: false,
        lease_late: true,
        ..member(server, "fsn1")
    };
    let fips = [fip(10, "fsn1", Some(1))];
    let got = plan(&fips, &[silent(1), silent(2)], 10);
    assert_eq!(
        got.moves
            .iter()
            .map(|m| (m.floating_ip, m.to))
            .collect::<Vec<_>>(),
        [(10, 2)]
    );
    let got = plan(&fips, &[silent(1)], 10);
    assert_eq!(got.stranded, vec![10], "not to its own holder");
}

/// Old finding 3: a target must have renewed within `FailoverAfter` less a
/// kubelet period (5 s to 15 s), so one that died with the holder is late
/// when the holder's time is up.
#[test]
fn a_target_must_have_renewed_within_failover_after_less_a_kubelet_period() {
    use super::takes_new_within;
    let s = Duration::from_secs;
    assert_eq!(takes_new_within(s(20)), s(10));
    assert_eq!(takes_new_within(s(15)), s(5));
    assert_eq!(takes_new_within(s(60)), s(15));
}

/// A move that sent nothing gives its slot back.
#[test]
fn a_refunded_move_frees_its_slot() {
    let t0 = Instant::now();
    let mut budget = MoveBudget::new(1, Duration::from_secs(60));
    budget.spend(t0);
    assert_eq!(budget.allowed(t0 + Duration::from_secs(1)), 0);
    budget.refund(t0);
    assert_eq!(budget.allowed(t0 + Duration::from_secs(1)), 1);
}
