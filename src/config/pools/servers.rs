//! Which servers a pool takes (`LabelSelector`, `NodeSelector`, `Robot`)
//! and whether it moves Floating IPs between them (`FloatingIpFailover`,
//! `FailoverAfter`, `FailoverMovesPerMinute`, `HolderLabel`), with the
//! rules that tie them
//! together.

use super::*;

/// How a pool chooses its servers: Cloud servers by `LabelSelector` (and
/// `NodeSelector`), Robot servers by `Robot`.
pub(super) struct ServerChoice {
    pub(super) label_selector: Option<LabelSelector>,
    pub(super) node_selector: Option<LabelSelector>,
    pub(super) robot: Option<RobotMembers>,
    /// `Robot` is set (valid or not).
    pub(super) has_robot: bool,
}

impl ServerChoice {
    pub(super) fn parse(fields: &Fields<'_>, problems: &mut Vec<String>) -> Self {
        let robot = fields
            .get("Robot")
            .and_then(|value| parse_robot(value, problems));
        let has_robot = fields.get("Robot").is_some();
        let label_selector = parse_label_selector(fields, has_robot, problems);
        let node_selector = fields.parsed("NodeSelector", parse_selector, problems);
        if node_selector.is_some() && label_selector.is_none() {
            problems.push(
                "NodeSelector is set, but LabelSelector is not; NodeSelector narrows the Cloud \
                 servers LabelSelector chooses (Robot servers have Robot.NodeSelector)"
                    .to_owned(),
            );
        }
        Self {
            label_selector,
            node_selector,
            robot,
            has_robot,
        }
    }

    /// What the kinds of address and failover need of the servers.
    pub(super) fn check_use(
        &self,
        addresses: &[AddressKind],
        failover: bool,
        problems: &mut Vec<String>,
    ) {
        if failover && self.has_robot {
            problems.push(
                "FloatingIpFailover and Robot are both set; failover moves Cloud Floating IPs, \
                 which a dedicated server cannot hold: put the Robot servers into a pool of \
                 their own"
                    .to_owned(),
            );
        }
        for kind in addresses.iter().filter(|k| k.robot_only()) {
            if !self.has_robot {
                problems.push(format!(
                    "Addresses has {kind}, but the pool has no Robot servers; add Robot or \
                     remove {kind}"
                ));
            }
        }
    }
}

/// `FloatingIpFailover` and its two settings: only on a pool that takes
/// `floating-ip` and names its Floating IPs with `FloatingIpSelector` (the
/// controller moves them between servers: never every IP of the project).
pub(super) fn parse_failover(
    fields: &Fields<'_>,
    addresses: &[AddressKind],
    has_selector: bool,
    problems: &mut Vec<String>,
) -> Option<Failover> {
    let on = fields
        .parsed("FloatingIpFailover", parse_bool, problems)
        .unwrap_or(false);
    let after = fields.parsed(
        "FailoverAfter",
        |s| {
            parse_bounded_duration(
                s,
                Duration::from_secs(15),
                Duration::from_secs(600),
                "a duration from 15s to 10m, e.g. 20s",
            )
        },
        problems,
    );
    let moves = fields.parsed(
        "FailoverMovesPerMinute",
        |s| match s.trim().parse::<u32>() {
            Ok(n) if (1..=60).contains(&n) => Ok(n),
            _ => Err("is not a whole number from 1 to 60, e.g. 10".to_owned()),
        },
        problems,
    );
    let holder_label = fields.parsed("HolderLabel", parse_bool, problems);
    if !on {
        for (key, set) in [
            ("FailoverAfter", after.is_some()),
            ("FailoverMovesPerMinute", moves.is_some()),
            ("HolderLabel", holder_label.is_some()),
        ] {
            if set {
                problems.push(format!(
                    "{key} is set, but FloatingIpFailover is not true; set it or remove {key}"
                ));
            }
        }
        return None;
    }
    if !addresses.contains(&AddressKind::FloatingIp) {
        problems.push(
            "FloatingIpFailover is true, but Addresses has no floating-ip; add \"floating-ip\" \
             to Addresses or remove FloatingIpFailover"
                .to_owned(),
        );
    }
    if !has_selector {
        problems.push(
            "FloatingIpFailover is true, but FloatingIpSelector is not set; failover moves the \
             Floating IPs it selects between servers, so name them, e.g. \"pool=edge\""
                .to_owned(),
        );
    }
    Some(Failover {
        after: after.unwrap_or(DEFAULT_FAILOVER_AFTER),
        moves_per_minute: moves.unwrap_or(DEFAULT_MOVES_PER_MINUTE),
        holder_label: holder_label.unwrap_or(false),
    })
}
