//! `canada-kaktus explain`: why each address of each server is in a pool,
//! or not. The answer is the controller's own decision, told: the split of
//! the listing with its trace (`members::members_traced`), the render and
//! its empty-pool guard, and the write gate's verdict on what every pool in
//! the cluster holds (`pool::gate`). Nothing here decides again.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::SystemTime;

use serde::Serialize;

use crate::config::Settings;
use crate::members::{Decision, Exclusion, NodeView, Outcome, Unhealthy};
use crate::pool::{gate, live_addresses, Pool};
use crate::reconcile::{render_traced, Listing};

/// Which part of the answer to show.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub pool: Option<String>,
    /// A server's name or ID.
    pub server: Option<String>,
}

/// The answer for every pool shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub pools: Vec<PoolAnswer>,
}

/// One pool: what a write would hold, why each address is in or out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolAnswer {
    pub pool: String,
    /// The addresses the pool would hold after this cycle's write.
    pub addresses: usize,
    /// Why the pool would not be written at all (a guard), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refused>,
    pub servers: Vec<ServerAnswer>,
    /// The Floating IPs a failover pool holds whatever server has them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub floating_ips: Vec<Line>,
    /// Addresses the pool holds now that no server gives any more: the
    /// next write removes them (under the shrink guard).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaving: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    pub guard: &'static str,
    pub message: String,
}

/// One server the pool's selector matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerAnswer {
    pub id: i64,
    pub name: String,
    pub lines: Vec<Line>,
}

/// One address (or one kind without an address, or the whole server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    /// The address kind (`null`: the whole server).
    pub kind: Option<&'static str>,
    pub address: Option<String>,
    /// In the pool after this cycle's write.
    #[serde(rename = "in")]
    pub inside: bool,
    /// A stable code: `in`, `excluded`, `no_address`, `blocked`,
    /// `earlier_pool`, `other_pool`, `foreign_pool`, `nodes_unknown`,
    /// `refused`.
    pub reason: &'static str,
    /// The reason in words, with the rule, the pool or the holder.
    pub detail: String,
}

/// Everything `explain` reads, read once.
pub struct State<'a> {
    pub settings: &'a Settings,
    pub listing: &'a Listing,
    pub nodes: &'a NodeView,
    /// Every pool in the cluster.
    pub pools: &'a [Pool],
}

/// The answer for `state`, as the controller would decide it now.
pub fn explain(state: &State<'_>, filter: &Filter) -> Explanation {
    let settings = state.settings;
    let (rendered, trace) = render_traced(
        settings,
        state.listing,
        state.nodes,
        &mut Unhealthy::default(),
        tokio::time::Instant::now(),
    );
    let names: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
    let additions = if state.nodes.complete || !settings.operate.watch_nodes {
        gate::Additions::Allowed
    } else {
        gate::Additions::NodesUnknown
    };
    let gate = gate::Gate::new(&names, state.pools, additions);
    let mut pools = Vec::new();
    for (index, rendered) in rendered.iter().enumerate() {
        let name = names[index];
        if filter.pool.as_deref().is_some_and(|p| p != name) {
            continue;
        }
        let verdict = gate.decide(index, &rendered.desired);
        let live = state
            .pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(live_addresses)
            .map(|l| l.addresses)
            .unwrap_or_default();
        let refusal = match (&rendered.verdict, &verdict.write) {
            (Err(error), _) => Some(Refused {
                guard: error.metric_label(),
                message: error.to_string(),
            }),
            (Ok(()), Err(refusal)) => Some(Refused {
                guard: refusal.metric_label(),
                message: refusal.to_string(),
            }),
            _ => None,
        };
        let written: BTreeSet<IpAddr> = match (&refusal, &verdict.write) {
            (None, Ok(approved)) => approved.pool().addresses.iter().copied().collect(),
            _ => live.clone(),
        };
        let ctx = Context {
            withheld: &verdict.withheld,
            refused: refusal.as_ref(),
            written: &written,
            nodes: state.nodes,
        };
        let decisions = trace.decisions.iter().filter(|d| d.pool == name);
        let (servers, floating_ips) = answer(decisions, &ctx, filter);
        let given: BTreeSet<IpAddr> = rendered.desired.addresses.iter().copied().collect();
        pools.push(PoolAnswer {
            pool: name.to_owned(),
            addresses: written.len(),
            leaving: match refusal {
                None => live.difference(&given).map(ToString::to_string).collect(),
                Some(_) => Vec::new(),
            },
            refused: refusal,
            servers,
            floating_ips,
        });
    }
    Explanation { pools }
}

/// What the lines of one pool are judged against.
struct Context<'a> {
    withheld: &'a [gate::Withheld],
    refused: Option<&'a Refused>,
    written: &'a BTreeSet<IpAddr>,
    nodes: &'a NodeView,
}

fn answer<'d>(
    decisions: impl Iterator<Item = &'d Decision>,
    ctx: &Context<'_>,
    filter: &Filter,
) -> (Vec<ServerAnswer>, Vec<Line>) {
    let mut servers: BTreeMap<i64, ServerAnswer> = BTreeMap::new();
    let mut floating = Vec::new();
    // What an earlier decision said of an address: blocked but kept, a
    // failover pool's Floating IP and its holder.
    let mut notes: BTreeMap<IpAddr, String> = BTreeMap::new();
    for decision in decisions {
        if let (Some(wanted), Some((id, name))) = (&filter.server, &decision.server) {
            if wanted != name && *wanted != id.to_string() {
                continue;
            }
        }
        let Some(line) = line(decision, ctx, &mut notes) else {
            continue;
        };
        match &decision.server {
            Some((id, name)) => servers
                .entry(*id)
                .or_insert_with(|| ServerAnswer {
                    id: *id,
                    name: name.clone(),
                    lines: Vec::new(),
                })
                .lines
                .push(line),
            None if filter.server.is_none() => floating.push(line),
            None => {}
        }
    }
    (servers.into_values().collect(), floating)
}

/// The line for one decision; `None` for a decision that only annotates
/// the next one (blocked but kept, a Floating IP's holder).
fn line(
    decision: &Decision,
    ctx: &Context<'_>,
    notes: &mut BTreeMap<IpAddr, String>,
) -> Option<Line> {
    let kind = decision.kind.map(|k| k.as_str());
    let address = decision.address;
    let out = |reason, detail: String| Line {
        kind,
        address: address.map(|a| a.to_string()),
        inside: false,
        reason,
        detail,
    };
    Some(match &decision.outcome {
        Outcome::Blocked { kept: true } => {
            notes.insert(
                address?,
                "Hetzner reports it blocked; kept (BlockedAddresses)".into(),
            );
            return None;
        }
        Outcome::Failover {
            floating_ip,
            holder,
        } => {
            let holder = holder.map_or("no server".to_owned(), |h| format!("server {h}"));
            notes.insert(
                address?,
                format!("Floating IP {floating_ip} of a failover pool, assigned to {holder}"),
            );
            return None;
        }
        Outcome::Excluded(rule) => out("excluded", excluded(*rule, decision, ctx.nodes)),
        Outcome::NoAddress(why) => out("no_address", format!("the server has none ({why})")),
        Outcome::Blocked { kept: false } => out(
            "blocked",
            "Hetzner reports it blocked by its abuse team; dropped (BlockedAddresses)".into(),
        ),
        Outcome::Claimed { by } => out(
            "earlier_pool",
            format!("pool {by}, earlier in Pools, has it (an address is in one pool only)"),
        ),
        Outcome::Given => given(address?, ctx, notes, out),
    })
}

/// The line of an address the split gave the pool: in, unless the write
/// gate withholds it or a guard refuses the write.
fn given(
    address: IpAddr,
    ctx: &Context<'_>,
    notes: &mut BTreeMap<IpAddr, String>,
    out: impl Fn(&'static str, String) -> Line,
) -> Line {
    let note = notes.remove(&address);
    let with_note = |text: String| match &note {
        Some(note) => format!("{note}; {text}"),
        None => text,
    };
    if let Some(w) = ctx.withheld.iter().find(|w| w.address == address) {
        let detail = match w.reason {
            gate::WithheldReason::OtherPool => format!("pool {} of ours still holds it", w.by),
            gate::WithheldReason::ForeignPool => {
                format!(
                    "pool {}, which this controller does not manage, covers it",
                    w.by
                )
            }
            gate::WithheldReason::NodesUnknown => {
                "the Nodes are not listed yet: nothing is added".into()
            }
        };
        return out(w.reason.metric_label(), with_note(detail));
    }
    let (reason, detail) = match ctx.refused {
        Some(refused) => (
            "refused",
            format!(
                "the pool is not written ({}): {}",
                refused.guard, refused.message
            ),
        ),
        None => ("in", "in the pool".to_owned()),
    };
    Line {
        inside: ctx.written.contains(&address),
        ..out(reason, with_note(detail))
    }
}

/// A node rule's words, and since when where the cluster knows it.
fn excluded(rule: Exclusion, decision: &Decision, nodes: &NodeView) -> String {
    let mut text = format!("left out: {} ({})", rule.describe(), rule.as_str());
    let node = decision
        .server
        .as_ref()
        .and_then(|(id, name)| nodes.node_of(*id, name));
    if let Some(node) = node {
        text.push_str(&format!("; Node {}", node.name));
        if let Some(since) = node.not_ready_for(SystemTime::now()) {
            text.push_str(&format!(", NotReady for {}s", since.as_secs()));
        }
    }
    text
}

impl Explanation {
    /// The answer for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for pool in &self.pools {
            out.push_str(&format!(
                "pool {}: {} address(es)\n",
                pool.pool, pool.addresses
            ));
            if let Some(refused) = &pool.refused {
                out.push_str(&format!(
                    "  not written ({}): {}\n",
                    refused.guard, refused.message
                ));
            }
            for server in &pool.servers {
                out.push_str(&format!("  server {} ({})\n", server.name, server.id));
                for line in &server.lines {
                    out.push_str(&format!("    {}\n", shown(line)));
                }
            }
            for line in &pool.floating_ips {
                out.push_str(&format!("  {}\n", shown(line)));
            }
            for address in &pool.leaving {
                out.push_str(&format!(
                    "  {address}: out (leaving: no server gives it any more)\n"
                ));
            }
        }
        out
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_owned()) + "\n"
    }
}

fn shown(line: &Line) -> String {
    let what = match (line.kind, &line.address) {
        (Some(kind), Some(address)) => format!("{kind} {address}"),
        (Some(kind), None) => kind.to_owned(),
        (None, _) => "server".to_owned(),
    };
    let state = if line.inside { "in" } else { "out" };
    format!("{what}: {state} ({}): {}", line.reason, line.detail)
}

#[cfg(test)]
mod tests;

/// Reads what the controller would read (Hetzner, the Nodes when the Node
/// watch is on, every pool) and explains it; a read that fails gives no
/// answer at all, never one from part of the state.
pub async fn read_and_explain(settings: &Settings, filter: &Filter) -> Result<Explanation, String> {
    let hetzner = crate::run::hetzner_client(settings).map_err(|e| e.to_string())?;
    let listing = crate::reconcile::list_hetzner(&hetzner, settings)
        .await
        .map_err(|e| format!("listing Hetzner failed: {e}"))?;
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("no usable Kubernetes configuration: {e}"))?;
    let nodes = if settings.operate.watch_nodes {
        crate::run::nodes::list_once(client.clone())
            .await
            .map_err(|e| format!("listing the Nodes failed: {e}"))?
    } else {
        NodeView::default()
    };
    let pools = crate::pool::PoolClient::new(client, settings.cilium_api_version);
    let resource = pools.resource().await.map_err(|e| e.to_string())?;
    let all = pools
        .list_all(&resource)
        .await
        .map_err(|e| format!("listing the pools failed: {e}"))?;
    let state = State {
        settings,
        listing: &listing,
        nodes: &nodes,
        pools: &all,
    };
    Ok(explain(&state, filter))
}
