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
use crate::failover::labels::{Carried, Carrier};
use crate::members::{Decision, Exclusion, NodeView, Outcome, Unhealthy};
use crate::pool::{gate, live_addresses, Pool};
use crate::reconcile::{render_traced, Listing, ReconcileError};
use crate::world::{self, World};

mod address;

/// Which part of the answer to show.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub pool: Option<String>,
    /// A server's name or ID.
    pub server: Option<String>,
    /// One address: the lines about it only.
    pub address: Option<IpAddr>,
}

/// The answer for every pool shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The address asked about, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub pools: Vec<PoolAnswer>,
}

/// Why `explain` gives no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    /// Something could not be read: nothing is explained from part of it.
    #[error("{0}")]
    Read(String),
    /// Nothing that was listed has the address asked about.
    #[error(
        "{address}: no Cloud server or Floating IP of this Hetzner project{} has this address; \
         check it, or ask about a server with --server",
        if *robot_listed { ", and no Robot server of the Robot account," } else { "" }
    )]
    Unknown { address: IpAddr, robot_listed: bool },
    /// The address is not one of the server `--server` names.
    #[error("{address} is no address of server {server}: {owners}")]
    NotOfServer {
        address: IpAddr,
        server: String,
        /// Who has it instead.
        owners: String,
    },
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
    /// Addresses the pool holds now that no server gives any more:
    /// `leaving` (the next write removes them), `held` (the shrink guard
    /// keeps them for now) or `refused` (the pool is not written).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaving: Vec<Line>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    pub guard: &'static str,
    pub message: String,
}

impl Refused {
    /// Why a cycle would not write the pool: the guard's label, or the
    /// failure's cause.
    fn of(error: &ReconcileError) -> Self {
        Refused {
            guard: error.metric_label(),
            message: error.to_string(),
        }
    }
}

/// One server the pool's selector matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerAnswer {
    /// The Cloud server's ID, or the Robot server's number.
    pub id: i64,
    /// A Robot (dedicated) server.
    pub robot: bool,
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
    /// `refused`, `failover_member`; for addresses no server gives any
    /// more, `held` or `leaving`.
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
    /// The holder labels the Nodes and CiliumNodes carry, or why they
    /// could not be read.
    pub holder_labels: &'a Result<Carried, String>,
}

/// The answer for `state`, as the controller would decide it now: the
/// split with its trace, then a cycle decided and not written
/// ([`crate::reconcile::dry_cycle`]: the shrink guard, the gate, the write passes).
pub async fn explain(state: &State<'_>, filter: &Filter) -> Explanation {
    let settings = state.settings;
    let (rendered, trace) = render_traced(
        settings,
        state.listing,
        state.nodes,
        &mut Unhealthy::default(),
        tokio::time::Instant::now(),
    );
    let given: Vec<BTreeSet<IpAddr>> = rendered
        .iter()
        .map(|r| r.desired.addresses.iter().copied().collect())
        .collect();
    let confirm_after = world::confirm_after(settings);
    let dry = world::decide(settings, rendered, state.nodes, state.pools.to_vec()).await;
    let mut pools = Vec::new();
    for ((pool, dry), given) in settings.pools.iter().zip(dry).zip(&given) {
        let name = pool.name.as_str();
        if filter.pool.as_deref().is_some_and(|p| p != name) {
            continue;
        }
        let live = live_of(state.pools, name);
        let refused = dry.failed.as_ref().map(Refused::of);
        let written: BTreeSet<IpAddr> = match &dry.written {
            Some(pool) if refused.is_none() => pool.addresses.iter().copied().collect(),
            _ => live.clone(),
        };
        let held: BTreeSet<IpAddr> = dry
            .held
            .iter()
            .flat_map(|h| h.addresses.iter().copied())
            .collect();
        let ctx = Context {
            withheld: &dry.withheld,
            refused: refused.as_ref(),
            written: &written,
            held: &held,
            confirm_after,
            nodes: state.nodes,
            holder_labels: pool.holder_label().then_some(state.holder_labels),
        };
        let decisions: Vec<&Decision> = trace.decisions.iter().filter(|d| d.pool == name).collect();
        // Addresses a line of a server or Floating IP already explains.
        let explained: BTreeSet<IpAddr> = decisions.iter().filter_map(|d| d.address).collect();
        let (servers, floating_ips) = answer(&decisions, &ctx, filter);
        // A server's own addresses are on its lines.
        let leaving = if filter.server.is_some() {
            Vec::new()
        } else {
            live.difference(given)
                .filter(|address| !explained.contains(address))
                .map(|address| leaving(*address, &ctx))
                .collect()
        };
        let mut answer = PoolAnswer {
            pool: name.to_owned(),
            addresses: written.len(),
            refused,
            servers,
            floating_ips,
            leaving,
        };
        if let Some(address) = filter.address {
            answer.only(address);
        }
        pools.push(answer);
    }
    // Of an address some pool speaks of, only those pools.
    if filter.address.is_some() && pools.iter().any(|p| !p.is_silent()) {
        pools.retain(|p| !p.is_silent());
    }
    Explanation {
        address: filter.address.map(|a| a.to_string()),
        pools,
    }
}

impl PoolAnswer {
    /// Keeps the lines about `address` (and the servers that have one).
    fn only(&mut self, address: IpAddr) {
        let text = address.to_string();
        let about = |line: &Line| line.address.as_deref() == Some(text.as_str());
        for server in &mut self.servers {
            server.lines.retain(about);
        }
        self.servers.retain(|s| !s.lines.is_empty());
        self.floating_ips.retain(about);
        self.leaving.retain(about);
    }

    fn is_silent(&self) -> bool {
        self.servers.is_empty() && self.floating_ips.is_empty() && self.leaving.is_empty()
    }
}

/// What the pool `name` holds now, from the read of every pool.
fn live_of(pools: &[Pool], name: &str) -> BTreeSet<IpAddr> {
    pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .map(live_addresses)
        .map(|l| l.addresses)
        .unwrap_or_default()
}

/// The line of an address the pool holds that no server gives it now (a
/// server deleted, or no longer selected).
fn leaving(address: IpAddr, ctx: &Context<'_>) -> Line {
    let gone = "no server gives it to this pool now".to_owned();
    let (reason, detail) = match ctx.refused {
        Some(refused) => (
            "refused",
            format!("{gone}; the pool is not written ({})", refused.guard),
        ),
        None if ctx.held.contains(&address) => ("held", gone),
        None => ("leaving", format!("{gone}: the next write removes it")),
    };
    let (inside, detail) = ctx.kept_anyway(reason, Some(address), detail);
    Line {
        kind: None,
        address: Some(address.to_string()),
        inside,
        reason,
        detail,
    }
}

/// What the lines of one pool are judged against.
struct Context<'a> {
    withheld: &'a [gate::Withheld],
    refused: Option<&'a Refused>,
    written: &'a BTreeSet<IpAddr>,
    /// Addresses the shrink guard keeps in the pool for now.
    held: &'a BTreeSet<IpAddr>,
    confirm_after: std::time::Duration,
    nodes: &'a NodeView,
    /// With `HolderLabel`, what carries the holder labels: a Floating
    /// IP's line names the Nodes and CiliumNodes that carry its label.
    holder_labels: Option<&'a Result<Carried, String>>,
}

impl Context<'_> {
    /// A line about `address`: in the pool when the write holds it (also
    /// when unwanted: the shrink guard keeps it, or a refused write leaves
    /// the pool as it is), with the shrink guard's hold said.
    fn kept_anyway(
        &self,
        reason: &str,
        address: Option<IpAddr>,
        mut detail: String,
    ) -> (bool, String) {
        let Some(address) = address else {
            return (false, detail);
        };
        let inside = self.written.contains(&address);
        if self.held.contains(&address) {
            detail.push_str(&format!(
                "; the shrink guard keeps it until a listing at least {}s later confirms the \
                 removal (MaxRemovalRatio)",
                self.confirm_after.as_secs()
            ));
        } else if let Some(refused) = self.refused.filter(|_| inside && reason != "refused") {
            detail.push_str(&format!(
                "; it stays while the pool is not written ({})",
                refused.guard
            ));
        }
        (inside, detail)
    }
}

fn answer(
    decisions: &[&Decision],
    ctx: &Context<'_>,
    filter: &Filter,
) -> (Vec<ServerAnswer>, Vec<Line>) {
    // A Robot server's key is its number negated (`Server::robot_id`).
    let shown = |server: &(i64, String)| match &filter.server {
        Some(wanted) => *wanted == server.1 || *wanted == server.0.abs().to_string(),
        None => true,
    };
    // Under --server, a failover pool's Floating IPs that server holds.
    let holders: BTreeSet<i64> = decisions
        .iter()
        .filter_map(|d| d.server.as_ref())
        .filter(|s| shown(s))
        .map(|s| s.0)
        .collect();
    let mut servers: BTreeMap<i64, ServerAnswer> = BTreeMap::new();
    let mut floating = Vec::new();
    // What an earlier decision said of an address: blocked but kept, a
    // failover pool's Floating IP and its holder.
    let mut notes: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut floating_shown = filter.server.is_none();
    for decision in decisions {
        if let Outcome::Failover { holder, .. } = decision.outcome {
            floating_shown =
                filter.server.is_none() || holder.is_some_and(|h| holders.contains(&h));
        }
        let Some(line) = line(decision, ctx, &mut notes) else {
            continue;
        };
        match &decision.server {
            Some(server) if shown(server) => servers
                .entry(server.0)
                .or_insert_with(|| ServerAnswer {
                    id: server.0.abs(),
                    robot: server.0 < 0,
                    name: server.1.clone(),
                    lines: Vec::new(),
                })
                .lines
                .push(line),
            Some(_) => {}
            None if floating_shown => floating.push(line),
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
    let out = |reason, detail: String| {
        let (inside, detail) = ctx.kept_anyway(reason, address, detail);
        Line {
            kind,
            address: address.map(|a| a.to_string()),
            inside,
            reason,
            detail,
        }
    };
    Some(match &decision.outcome {
        Outcome::Blocked { kept: true } => {
            let text = "Hetzner reports it blocked; kept (BlockedAddresses)".to_owned();
            note(notes, address?, text);
            return None;
        }
        Outcome::Failover {
            floating_ip,
            holder,
        } => {
            let holder = holder.map_or("no server".to_owned(), |h| format!("server {h}"));
            let mut text =
                format!("Floating IP {floating_ip} of a failover pool, assigned to {holder}");
            match ctx.holder_labels {
                Some(Ok(carried)) => text.push_str(&labelled(address?, carried)),
                Some(Err(error)) => {
                    text.push_str(&format!("; the holder labels could not be read: {error}"));
                }
                None => {}
            }
            note(notes, address?, text);
            return None;
        }
        Outcome::Excluded(rule) => out("excluded", excluded(*rule, decision, ctx.nodes)),
        Outcome::FailoverMember => out(
            "failover_member",
            "a failover pool holds its Floating IPs itself, not through a server; this server \
             may hold one (see the pool's floating_ips)"
                .into(),
        ),
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
    out(reason, with_note(detail))
}

/// Which Nodes and CiliumNodes carry the holder label of the Floating IP
/// at `address`, as the tail of its line.
fn labelled(address: IpAddr, carried: &Carried) -> String {
    let key = crate::failover::labels::fip_key(address);
    let on = |kind: Carrier| -> Vec<&str> {
        (carried.iter())
            .filter(|((carrier, _), keys)| *carrier == kind && keys.contains(&key))
            .map(|((_, name), _)| name.as_str())
            .collect()
    };
    let (nodes, cilium_nodes) = (on(Carrier::Node), on(Carrier::CiliumNode));
    if nodes.is_empty() && cilium_nodes.is_empty() {
        return format!("; nothing carries its holder label {key}");
    }
    let list = |names: Vec<&str>| match names.is_empty() {
        true => "none".to_owned(),
        false => names.join(", "),
    };
    format!(
        "; its holder label {key} is on Node {} and CiliumNode {}",
        list(nodes),
        list(cilium_nodes)
    )
}

/// Adds `text` to what is noted of `address`.
fn note(notes: &mut BTreeMap<IpAddr, String>, address: IpAddr, text: String) {
    notes
        .entry(address)
        .and_modify(|noted| {
            noted.push_str("; ");
            noted.push_str(&text);
        })
        .or_insert(text);
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

mod text;

#[cfg(test)]
mod tests;

/// Reads what the controller would read (Hetzner, the Nodes when the Node
/// watch is on, every pool) and explains it; a read that fails gives no
/// answer at all, never one from part of the state. Every read is bounded.
pub async fn read_and_explain(
    settings: &Settings,
    filter: &Filter,
) -> Result<Explanation, ExplainError> {
    let clients = world::connect(settings)
        .await
        .map_err(|e| ExplainError::Read(e.to_string()))?;
    let world = World::read(&clients, settings)
        .await
        .map_err(ExplainError::Read)?;
    let state = State {
        settings,
        listing: &world.listing,
        nodes: &world.nodes,
        pools: &world.pools,
        holder_labels: &world.holder_labels,
    };
    let mut answer = explain(&state, filter).await;
    match filter.address {
        Some(address) if answer.pools.iter().all(PoolAnswer::is_silent) => {
            let everything = world::read_everything(&clients.hetzner, settings)
                .await
                .map_err(|e| {
                    ExplainError::Read(format!("listing every Hetzner server failed: {e}"))
                })?;
            // A Robot listing that failed is a read that failed, not an
            // answer that nobody has the address.
            if let Some(error) = world.listing.robot.error() {
                return Err(ExplainError::Read(format!(
                    "the Robot listing failed: {error}"
                )));
            }
            let robot = world.listing.robot.servers();
            let owners = address::owners(
                address,
                everything.servers.iter().chain(robot),
                &everything.floating_ips,
            );
            let robot_listed = settings.pools.iter().any(|p| p.robot.is_some());
            address::fill_unclaimed(
                settings,
                &mut answer,
                &owners,
                address,
                filter,
                robot_listed,
            )?;
            Ok(answer)
        }
        _ => Ok(answer),
    }
}
