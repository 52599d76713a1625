use super::*;
use crate::pool::PoolDiff;

fn report(written: Option<WriteReason>, added: &[&str], removed: &[&str]) -> CycleReport {
    CycleReport {
        kind: CycleKind::Full,
        listing: None,
        addresses: 3,
        diff: PoolDiff {
            added: added.iter().map(|a| a.parse().unwrap()).collect(),
            removed: removed.iter().map(|a| a.parse().unwrap()).collect(),
            foreign_blocks_removed: 0,
        },
        written,
        api_version: "cilium.io/v2".into(),
        held: None,
        confirmed: None,
        ..CycleReport::default()
    }
}

#[test]
fn a_write_names_the_addresses_and_no_write_says_nothing() {
    let mut planner = EventPlanner::new();
    assert!(planner.plan(Ok(&report(None, &[], &[]))).is_empty());
    let events = planner.plan(Ok(&report(
        Some(WriteReason::BlocksDiffer),
        &["203.0.113.5"],
        &["198.51.100.1", "198.51.100.2"],
    )));
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].reason, "AddressesAdded");
    assert_eq!(
        events[0].note,
        "Added 1 address: 203.0.113.5; the pool now has 3 addresses"
    );
    assert_eq!(events[1].reason, "AddressesRemoved");
    assert!(events[1].note.contains("198.51.100.1, 198.51.100.2"));
    let created = planner.plan(Ok(&report(Some(WriteReason::Missing), &["1.2.3.4"], &[])));
    assert_eq!(created[0].reason, "PoolCreated");
    assert!(!created[0].warning);
}

#[test]
fn repeated_failures_give_one_warning_until_the_cause_changes_or_a_success() {
    let mut planner = EventPlanner::new();
    let timeout = || Err(ReconcileError::TimedOut { seconds: 1 });
    let first = planner.plan(timeout().as_ref());
    assert_eq!(first.len(), 1);
    assert!(first[0].warning);
    assert_eq!(first[0].reason, "ReconcileFailed");
    assert!(planner.plan(timeout().as_ref()).is_empty());
    assert!(planner.plan(timeout().as_ref()).is_empty());
    let conflict = planner.plan(Err(&ReconcileError::PoolConflict {
        name: "p".into(),
        reason: "cidr_overlap".into(),
        message: "m".into(),
    }));
    assert_eq!(conflict[0].reason, "PoolConflict");
    assert!(planner.plan(Ok(&report(None, &[], &[]))).is_empty());
    assert_eq!(
        planner.plan(timeout().as_ref()).len(),
        1,
        "again after a success"
    );
}

#[test]
fn long_notes_are_cut_to_the_api_limit() {
    let note = truncate("é".repeat(2000));
    assert!(note.len() <= MAX_NOTE_BYTES);
    assert!(note.ends_with("..."));
    let many: Vec<std::net::IpAddr> = (0..30u8)
        .map(|i| std::net::Ipv4Addr::new(192, 0, 2, i).into())
        .collect();
    assert!(list(&many).ends_with("and 10 more"));
}
