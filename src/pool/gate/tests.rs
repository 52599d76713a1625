use std::collections::BTreeMap;
use std::net::IpAddr;

use super::*;
use crate::pool::object::{Block, BlockRange};
use crate::pool::ranges::range;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn pool(name: &str, blocks: &[Block], disabled: bool) -> Pool {
    let mut pool = Pool::default();
    pool.metadata.name = Some(name.into());
    pool.spec.blocks = blocks.to_vec();
    pool.spec.disabled = disabled.then_some(true);
    pool
}

fn cidr(text: &str) -> Block {
    Block {
        cidr: Some(text.into()),
        ..Block::default()
    }
}

/// A `start`–`stop` block (`stop` absent: one address).
fn span(start: &str, stop: Option<&str>) -> Block {
    Block {
        cidr: None,
        range: Some(Box::new(BlockRange {
            start: Some(start.into()),
            stop: stop.map(Into::into),
        })),
    }
}

fn wanted(name: &str, addresses: &[&str]) -> DesiredPool {
    let mut addresses: Vec<IpAddr> = addresses.iter().map(|a| ip(a)).collect();
    addresses.sort();
    DesiredPool {
        name: name.into(),
        annotations: BTreeMap::new(),
        labels: BTreeMap::new(),
        addresses,
        service_selector: None,
    }
}

fn written(verdict: &Verdict) -> Vec<String> {
    match &verdict.write {
        Ok(approved) => approved
            .pool()
            .addresses
            .iter()
            .map(ToString::to_string)
            .collect(),
        Err(refusal) => panic!("refused: {refusal}"),
    }
}

fn withheld(verdict: &Verdict) -> Vec<(String, String, &'static str)> {
    verdict
        .withheld
        .iter()
        .map(|w| (w.address.to_string(), w.by.clone(), w.reason.metric_label()))
        .collect()
}

#[test]
fn other_pools_cover_cidrs_and_ranges_of_both_families_disabled_or_not() {
    let pools = [
        pool(
            "v4",
            &[cidr("198.51.100.0/24"), cidr("192.0.2.7/32")],
            false,
        ),
        pool(
            "range",
            &[span("203.0.113.10", Some("203.0.113.20"))],
            false,
        ),
        pool("single", &[span("203.0.113.99", None)], false),
        pool("v6", &[cidr("2001:db8:1::/64")], false),
        // Cilium's conflict check never reads spec.disabled.
        pool("off", &[cidr("10.0.0.0/8")], true),
        pool("broken", &[cidr("garbage"), cidr("1.2.3.4/33")], false),
    ];
    let gate = Gate::new(&["ours"], &pools, Additions::Allowed);
    assert_eq!(gate.foreign_pools(), 6);
    for (address, want) in [
        ("198.51.100.0", Some("v4")),
        ("198.51.100.255", Some("v4")),
        ("198.51.101.0", None),
        ("192.0.2.7", Some("v4")),
        ("192.0.2.8", None),
        ("203.0.113.10", Some("range")),
        ("203.0.113.20", Some("range")),
        ("203.0.113.21", None),
        ("203.0.113.99", Some("single")),
        ("2001:db8:1::1", Some("v6")),
        ("2001:db8:2::1", None),
        ("10.1.2.3", Some("off")),
        ("1.2.3.4", None),
    ] {
        let verdict = gate.decide(0, &wanted("ours", &[address, "100.64.0.1"]));
        let by: Option<String> = verdict.withheld.first().map(|w| w.by.clone());
        assert_eq!(by.as_deref(), want, "{address}");
        assert_eq!(
            verdict.withheld.first().map(|w| w.foreign()),
            want.map(|_| true)
        );
    }
}

#[test]
fn a_write_never_adds_what_another_pool_covers_and_keeps_what_it_holds() {
    let pools = [
        pool(
            "theirs",
            &[cidr("192.0.2.9/32"), cidr("192.0.2.1/32")],
            false,
        ),
        pool("ours", &[cidr("192.0.2.1/32"), cidr("192.0.2.4/32")], false),
        pool("other", &[span("192.0.2.3", Some("192.0.2.4"))], false),
    ];
    let gate = Gate::new(&["ours", "other"], &pools, Additions::Allowed);
    let verdict = gate.decide(
        0,
        &wanted(
            "ours",
            &[
                "192.0.2.1",
                "192.0.2.2",
                "192.0.2.3",
                "192.0.2.4",
                "192.0.2.9",
            ],
        ),
    );
    assert_eq!(
        written(&verdict),
        ["192.0.2.1", "192.0.2.2", "192.0.2.4"],
        "2 is new and free; 3 is in another managed pool's range; 9 a foreign pool's; 1 and 4 \
         overlap other pools but are ours already, and removing them would take them from \
         their Services"
    );
    assert_eq!(
        withheld(&verdict),
        [
            ("192.0.2.3".into(), "other".into(), "other_pool"),
            ("192.0.2.9".into(), "theirs".into(), "foreign_pool"),
        ]
    );
}

#[test]
fn without_the_node_list_a_pool_only_keeps_or_removes() {
    let pools = [pool(
        "p",
        &[cidr("192.0.2.1/32"), cidr("192.0.2.2/32")],
        false,
    )];
    let gate = Gate::new(&["p"], &pools, Additions::NodesUnknown);
    let verdict = gate.decide(0, &wanted("p", &["192.0.2.1", "192.0.2.3"]));
    assert_eq!(written(&verdict), ["192.0.2.1"], ".2 goes, .3 waits");
    assert_eq!(
        withheld(&verdict),
        [("192.0.2.3".into(), String::new(), "nodes_unknown")]
    );
    // A pool that does not exist yet is not created.
    let gate = Gate::new(&["p"], &[], Additions::NodesUnknown);
    let verdict = gate.decide(0, &wanted("p", &["192.0.2.1"]));
    assert_eq!(
        verdict.write.unwrap_err().metric_label(),
        "nodes_unknown",
        "nothing is added"
    );
}

#[test]
fn no_write_is_ever_empty() {
    let gate = Gate::new(&["p"], &[], Additions::Allowed);
    assert_eq!(
        gate.decide(0, &wanted("p", &[])).write,
        Err(Refusal::NothingToWrite)
    );
    let pools = [pool("theirs", &[cidr("192.0.2.0/24")], true)];
    let gate = Gate::new(&["p"], &pools, Additions::Allowed);
    assert_eq!(
        gate.decide(0, &wanted("p", &["192.0.2.1"])).write,
        Err(Refusal::AllWithheld {
            addresses: 1,
            pools: "theirs".into()
        })
    );
}

#[test]
fn a_failed_write_counts_as_possibly_done() {
    let pools = [pool("a", &[cidr("192.0.2.1/32")], false)];
    let mut gate = Gate::new(&["a", "b"], &pools, Additions::Allowed);
    let a = gate.decide(0, &wanted("a", &["192.0.2.2"])).write.unwrap();
    assert!(!gate.record(&a, false), "a failed write lets go of nothing");
    // a may hold .1 and .2 now: b gets neither.
    let b = gate.decide(1, &wanted("b", &["192.0.2.1", "192.0.2.2", "192.0.2.3"]));
    assert_eq!(written(&b), ["192.0.2.3"]);
    // Once a's write is done, .1 is free.
    assert!(gate.record(&a, true), "a let go of .1");
    let b = gate.decide(1, &wanted("b", &["192.0.2.1", "192.0.2.3"]));
    assert_eq!(written(&b), ["192.0.2.1", "192.0.2.3"]);
}

#[test]
fn pools_that_wait_for_each_other_are_found() {
    let stuck = |pairs: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
        pairs
            .iter()
            .map(|(name, by)| (name.to_string(), by.iter().map(|b| b.to_string()).collect()))
            .collect()
    };
    assert_eq!(
        swaps(&stuck(&[("a", &["b"]), ("b", &["a"])])),
        vec![vec!["a".to_owned(), "b".to_owned()]]
    );
    assert_eq!(
        swaps(&stuck(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])])),
        vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]
    );
    assert!(
        swaps(&stuck(&[("a", &["b"])])).is_empty(),
        "b is not stuck: it may still let go"
    );
    // a waits for c (stuck on a foreign pool) and for b; b waits for a.
    assert_eq!(
        swaps(&stuck(&[("a", &["c", "b"]), ("b", &["a"]), ("c", &[])])),
        vec![vec!["a".to_owned(), "b".to_owned()]],
        "every pool a pool waits for counts, not the first"
    );
}

#[test]
fn merging_joins_overlaps_and_keeps_gaps_and_families_apart() {
    let merged = Ranges::of_blocks(&[
        span("10.0.0.5", None),
        span("2001:db8::1", Some("2001:db8::9")),
        span("10.0.0.1", Some("10.0.0.8")),
        // Inside the range before it: its end must not shorten that one
        // (10.0.0.5 would then stand apart).
        span("10.0.0.2", Some("10.0.0.3")),
        // Next to 10.0.0.8, not overlapping it: a range of its own.
        span("10.0.0.9", None),
        span("10.0.0.9", None),
        span("2001:db8::5", None),
    ]);
    let expected = Ranges::of_blocks(&[
        span("10.0.0.1", Some("10.0.0.8")),
        span("10.0.0.9", None),
        span("2001:db8::1", Some("2001:db8::9")),
    ]);
    assert_eq!(merged, expected);
    assert!(merged.covers(ip("10.0.0.6")));
    assert!(!merged.covers(ip("10.0.0.10")));
    assert!(!merged.covers(ip("2001:db8::a")));
}

#[test]
fn ranges_read_every_block_form() {
    assert_eq!(
        range(&cidr("10.1.2.3/8")),
        Some((ip("10.0.0.0"), ip("10.255.255.255")))
    );
    assert_eq!(
        range(&cidr("0.0.0.0/0")),
        Some((ip("0.0.0.0"), ip("255.255.255.255")))
    );
    assert_eq!(
        range(&span("2001:db8::1", Some("2001:db8::9"))),
        Some((ip("2001:db8::1"), ip("2001:db8::9")))
    );
    assert_eq!(range(&span("192.0.2.9", Some("192.0.2.1"))), None);
    assert_eq!(range(&span("192.0.2.1", Some("2001:db8::1"))), None);
    let merged = Ranges::of_blocks(&[
        cidr("192.0.2.0/30"),
        cidr("192.0.2.2/31"),
        cidr("2001:db8::/127"),
    ]);
    assert!(merged.covers(ip("192.0.2.3")));
    assert!(!merged.covers(ip("192.0.2.4")));
    assert!(merged.covers(ip("2001:db8::1")));
    assert!(!merged.covers(ip("2001:db8::2")));
    assert!(!merged.covers(ip("::192.0.2.1")));
}

/// Cilium 1.15 (the release for `v2alpha1`-only clusters) settles conflicts
/// over `spec.cidrs` and `spec.blocks` together (`operator/pkg/lbipam`,
/// `append(pool.Spec.Cidrs, pool.Spec.Blocks...)`): a pool written in the
/// older form covers its `cidrs` too, in the pool as the API server sends it.
#[test]
fn the_older_spec_cidrs_covers_as_blocks_do() {
    let old: Pool = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hand-made"},
        "spec": {"cidrs": [{"cidr": "198.51.100.0/24"}], "blocks": [{"cidr": "192.0.2.1/32"}]},
    }))
    .unwrap();
    let gate = Gate::new(&["ours"], [&old], Additions::Allowed);
    let verdict = gate.decide(
        0,
        &wanted("ours", &["198.51.100.5", "192.0.2.1", "100.64.0.1"]),
    );
    assert_eq!(written(&verdict), ["100.64.0.1"]);
    assert_eq!(
        withheld(&verdict),
        [
            ("192.0.2.1".into(), "hand-made".into(), "foreign_pool"),
            ("198.51.100.5".into(), "hand-made".into(), "foreign_pool"),
        ]
    );
}

/// A pool of ours that has entries in the older `spec.cidrs` (another field
/// manager owns them, so our apply can never clear them, and Cilium 1.15
/// counts them): it is never written, whatever path asks, and says why.
#[test]
fn a_pool_of_ours_with_the_older_spec_cidrs_is_never_written() {
    let ours: Pool = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ours"},
        "spec": {"cidrs": [{"cidr": "10.0.0.0/24"}], "blocks": [{"cidr": "10.0.0.5/32"}]},
    }))
    .unwrap();
    let gate = Gate::new(&["ours"], [&ours], Additions::Allowed);
    let verdict = gate.decide(0, &wanted("ours", &["10.0.0.5", "100.64.0.1"]));
    let refusal = verdict.write.expect_err("written");
    assert_eq!(refusal.metric_label(), "older_cidrs");
    assert!(refusal.to_string().contains("10.0.0.0/24"), "{refusal}");
}

/// Ranges and wider CIDRs of a pool of ours are kept address by address
/// while a removal waits; past 16,384 addresses in all (a write that large
/// would near the API server's request limit) the pool is refused, even
/// when no single block is that wide.
#[test]
fn a_pool_of_ours_with_too_many_addresses_in_ranges_is_never_written() {
    let ours = pool(
        "ours",
        &[
            cidr("10.1.0.0/18"),
            cidr("10.2.0.0/18"),
            cidr("10.3.0.1/32"),
        ],
        false,
    );
    let gate = Gate::new(&["ours"], [&ours], Additions::Allowed);
    let refusal = gate
        .decide(0, &wanted("ours", &["10.3.0.1"]))
        .write
        .expect_err("written");
    assert_eq!(refusal.metric_label(), "wide_block");
    let text = refusal.to_string();
    assert!(
        text.contains("10.1.0.0/18") && text.contains("10.2.0.0/18"),
        "{text}"
    );
    // Within the cap: written.
    let small = pool("ours", &[span("10.4.0.1", Some("10.4.0.200"))], false);
    let gate = Gate::new(&["ours"], [&small], Additions::Allowed);
    assert_eq!(
        written(&gate.decide(0, &wanted("ours", &["10.4.0.1"]))),
        ["10.4.0.1"]
    );
}

/// Blocks read as the API server sends them and written back the same:
/// a CIDR, a range, a lone `start`, and a lone `stop` (which Cilium cannot
/// read, kept as it came). Each takes 24 bytes: a pool of 10,000 is read
/// whole twice per full cycle.
#[test]
fn blocks_read_and_write_every_form_in_24_bytes() {
    let sent = serde_json::json!([
        {"cidr": "192.0.2.1/32"},
        {"start": "192.0.2.5", "stop": "192.0.2.9"},
        {"start": "2001:db8::1"},
        {"stop": "192.0.2.9"},
    ]);
    let blocks: Vec<Block> = serde_json::from_value(sent.clone()).unwrap();
    assert_eq!(blocks[0], cidr("192.0.2.1/32"));
    assert_eq!(blocks[1], span("192.0.2.5", Some("192.0.2.9")));
    assert_eq!(
        (blocks[2].start(), blocks[2].stop()),
        (Some("2001:db8::1"), None)
    );
    assert_eq!(
        (blocks[3].start(), blocks[3].stop()),
        (None, Some("192.0.2.9"))
    );
    assert_eq!(range(&blocks[3]), None);
    assert_eq!(serde_json::to_value(&blocks).unwrap(), sent);
    assert_eq!(std::mem::size_of::<Block>(), 24);
}
