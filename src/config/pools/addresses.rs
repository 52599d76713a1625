//! Which addresses a pool takes from its servers: the kinds, the IPv6 host
//! part, the private network, and the shrink guard's ratio.

use super::*;

/// The settings that refine the kinds of address, each checked against the
/// kinds it needs.
pub(super) struct AddressOptions {
    pub(super) ipv6_host_part: Ipv6Addr,
    pub(super) private_network: Option<NetworkRef>,
    pub(super) include_alias_ips: bool,
    pub(super) floating_ip_selector: Option<LabelSelector>,
}

impl AddressOptions {
    /// In this order: Ipv6HostPart, PrivateNetwork, IncludeAliasIps,
    /// FloatingIpSelector.
    pub(super) fn parse(
        fields: &Fields<'_>,
        addresses: &[AddressKind],
        problems: &mut Vec<String>,
    ) -> Self {
        let ipv6_host_part = parse_ipv6_host_part(fields, addresses, problems);
        let private_network = fields
            .get("PrivateNetwork")
            .and_then(|value| parse_private_network(value, addresses, problems));
        let include_alias_ips = fields
            .parsed("IncludeAliasIps", parse_bool, problems)
            .unwrap_or(false);
        if include_alias_ips && !addresses.contains(&AddressKind::PrivateIpv4) {
            problems.push("IncludeAliasIps is true, but Addresses has no private-ipv4".to_owned());
        }
        let floating_ip_selector = fields.parsed(
            "FloatingIpSelector",
            |s| {
                s.parse::<LabelSelector>()
                    .map_err(|e| format!("is not a valid label selector: {e}"))
            },
            problems,
        );
        if floating_ip_selector.is_some() && !addresses.contains(&AddressKind::FloatingIp) {
            problems.push("FloatingIpSelector is set, but Addresses has no floating-ip".to_owned());
        }
        Self {
            ipv6_host_part,
            private_network,
            include_alias_ips,
            floating_ip_selector,
        }
    }
}

/// `Ipv6HostPart`, the default when unset or invalid.
pub(super) fn parse_ipv6_host_part(
    fields: &Fields<'_>,
    addresses: &[AddressKind],
    problems: &mut Vec<String>,
) -> Ipv6Addr {
    let has_ipv6 = addresses
        .iter()
        .any(|k| matches!(k, AddressKind::PublicIpv6 | AddressKind::FloatingIp));
    match fields.text("Ipv6HostPart", problems) {
        None => DEFAULT_IPV6_HOST_PART,
        Some(text) => {
            if !has_ipv6 {
                problems.push(
                    "Ipv6HostPart is set, but Addresses has neither public-ipv6 nor floating-ip"
                        .to_owned(),
                );
            }
            parse_host_part(&text).unwrap_or_else(|reason| {
                problems.push(format!("Ipv6HostPart {} {reason}", quote(text.trim())));
                DEFAULT_IPV6_HOST_PART
            })
        }
    }
}

/// The value of `PrivateNetwork` (not null): a network's ID or name.
pub(super) fn parse_private_network(
    value: &serde_json::Value,
    addresses: &[AddressKind],
    problems: &mut Vec<String>,
) -> Option<NetworkRef> {
    if !addresses.contains(&AddressKind::PrivateIpv4) {
        problems.push("PrivateNetwork is set, but Addresses has no private-ipv4".to_owned());
    }
    match value {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(id) if id > 0 => Some(NetworkRef::Id(id)),
            _ => {
                problems.push(format!("PrivateNetwork {n} is not a network ID"));
                None
            }
        },
        serde_json::Value::String(text) if !text.trim().is_empty() => {
            let text = text.trim();
            Some(match text.parse::<i64>() {
                Ok(id) if id > 0 => NetworkRef::Id(id),
                _ => NetworkRef::Name(text.to_owned()),
            })
        }
        other => {
            problems.push(format!(
                "PrivateNetwork is a JSON {}; give the network's ID or name",
                json_type(other)
            ));
            None
        }
    }
}

/// The table's default of `MaxRemovalRatio`, for pools that set none.
pub(super) fn default_removal_ratio() -> f64 {
    match MAX_REMOVAL_RATIO.default {
        SettingDefault::Value(text) => parse_ratio(text).unwrap_or(0.0),
        SettingDefault::Unset(_) => 0.0,
    }
}

pub(super) fn parse_kinds(
    value: &serde_json::Value,
    problems: &mut Vec<String>,
) -> Vec<AddressKind> {
    let serde_json::Value::Array(items) = value else {
        problems.push(format!(
            "Addresses is a JSON {}; give a list such as [\"public-ipv4\", \"public-ipv6\"]",
            json_type(value)
        ));
        return Vec::new();
    };
    let mut kinds = Vec::new();
    for item in items {
        match item.as_str().map(str::parse::<AddressKind>) {
            Some(Ok(kind)) => {
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            Some(Err(e)) => problems.push(format!("Addresses: {e}")),
            None => problems.push(format!(
                "Addresses holds a JSON {}; each entry is a name such as \"public-ipv4\"",
                json_type(item)
            )),
        }
    }
    if items.is_empty() {
        problems.push(
            "Addresses is empty; list at least one of public-ipv4, public-ipv6, private-ipv4, \
             floating-ip, robot-additional-ip, robot-failover-ip (or leave it out for \
             public-ipv4)"
                .to_owned(),
        );
    }
    kinds
}

/// An IPv6 address with only host bits (the lower 64), not `::`.
pub(super) fn parse_host_part(text: &str) -> Result<Ipv6Addr, String> {
    let address: Ipv6Addr = text
        .trim()
        .parse()
        .map_err(|_| "is not an IPv6 address; write the host part, e.g. ::1".to_owned())?;
    let bits = u128::from(address);
    if bits == 0 {
        return Err("is the network address itself; use e.g. ::1".to_owned());
    }
    if bits >> 64 != 0 {
        return Err(
            "sets bits of the /64 network; write only the host part, e.g. ::1 or ::a:1".to_owned(),
        );
    }
    Ok(address)
}
