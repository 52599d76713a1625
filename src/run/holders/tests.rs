//! What a pass's end does to the holder labels' part, without a cluster.

use super::*;

fn hold(listing: u64) -> Want {
    Want::Hold {
        wanted: Wanted::default(),
        listing,
        pools: vec!["edge".to_owned()],
        term: 1,
    }
}

fn labelled(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn failed() -> LabelError {
    LabelError::Conflict {
        kind: "Node",
        name: "node-1".to_owned(),
    }
}

fn refused() -> LabelError {
    LabelError::Refused {
        verb: "patch",
        kind: "Node",
        name: "node-1".to_owned(),
    }
}

#[test]
fn a_new_listing_reads_everything_and_then_only_what_changes() {
    let mut memory = Memory::default();
    assert_eq!(memory.next(&Want::Idle), None);
    let pass = memory.next(&hold(1)).unwrap();
    assert!(pass.every);
    let told = memory.ended(&pass, Ok(labelled(&["node-1"])));
    assert_eq!(told, (Told::Worked { again: false }, None));
    assert!(!memory.next(&hold(1)).unwrap().every, "the same listing");
    assert_eq!(memory.labelled, labelled(&["node-1"]));
    assert!(memory.next(&hold(2)).unwrap().every, "a new listing");
}

#[test]
fn a_failed_pass_is_tried_again_with_backoff_and_reads_everything() {
    let mut memory = Memory::default();
    let pass = memory.next(&hold(1)).unwrap();
    memory.ended(&pass, Ok(labelled(&["node-1"])));
    let pass = memory.next(&hold(1)).unwrap();
    let error = failed();
    assert_eq!(
        memory.ended(&pass, Err(&error)),
        (Told::Failed { first: true }, Some(RETRY_BASE))
    );
    assert!(
        memory.next(&hold(1)).unwrap().every,
        "what it wrote is not known"
    );
    assert_eq!(
        memory.ended(&pass, Err(&error)),
        (Told::Failed { first: false }, Some(RETRY_BASE * 2))
    );
    let told = memory.ended(&pass, Ok(labelled(&[])));
    assert_eq!(told, (Told::Worked { again: true }, None));
}

#[test]
fn a_fenced_pass_is_tried_again_and_reads_everything() {
    let mut memory = Memory::default();
    let pass = memory.next(&hold(1)).unwrap();
    memory.ended(&pass, Ok(labelled(&["node-1"])));
    let pass = memory.next(&hold(1)).unwrap();
    let (told, retry) = memory.ended(&pass, Err(&LabelError::Fenced));
    assert_eq!(told, Told::Fenced);
    assert!(retry.is_some(), "a fence closed for a moment opens again");
    assert!(memory.next(&hold(1)).unwrap().every);
}

#[test]
fn clear_runs_once_even_when_refused_and_hold_starts_again() {
    let mut memory = Memory::default();
    let clear = Want::Clear { term: 1 };
    let pass = memory.next(&clear).unwrap();
    assert!(pass.every && pass.wanted == Wanted::default());
    assert_eq!(
        memory.ended(&pass, Err(&refused())),
        (Told::ClearRefused, None)
    );
    assert_eq!(memory.next(&clear), None, "not again");
    let pass = memory.next(&hold(3)).unwrap();
    memory.ended(&pass, Ok(labelled(&[])));
    let pass = memory.next(&clear).unwrap();
    assert_eq!(
        memory.ended(&pass, Ok(labelled(&[]))),
        (Told::Cleared, None)
    );
    assert_eq!(memory.next(&clear), None);
    // A Clear that failed otherwise is tried again.
    let mut memory = Memory::default();
    let pass = memory.next(&clear).unwrap();
    let (_, retry) = memory.ended(&pass, Err(&failed()));
    assert!(retry.is_some());
    assert!(memory.next(&clear).is_some());
}

#[test]
fn a_hold_that_failed_still_lets_the_next_clear_run() {
    let mut memory = Memory::default();
    let clear = Want::Clear { term: 1 };
    let pass = memory.next(&clear).unwrap();
    memory.ended(&pass, Ok(labelled(&[])));
    // On again: the first pass adds a label, then fails.
    let pass = memory.next(&hold(4)).unwrap();
    memory.ended(&pass, Err(&failed()));
    // Off again before a pass worked: the Clear runs.
    assert!(
        memory.next(&clear).is_some(),
        "the labels of the failed pass go"
    );
}
