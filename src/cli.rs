//! Command line: run the controller, run one reconcile, or print the pool.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tracing::{error, info, warn};

use crate::config::{self, NodeRules, RobotRef, Settings};
use crate::members::{NodeView, Unhealthy};
use crate::pool::{candidate_versions, DesiredPool};
use crate::reconcile::{self, shared_selector, Clients, CycleInput, Reconciler};
use crate::run::{self, ControlLoop, LoopTimings};
use crate::serve::{http, telemetry};
use crate::world::{self, ConnectError};

/// Exit status for invalid configuration, apart from runtime failures (1).
pub const EXIT_CONFIG: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "canada-kaktus",
    version,
    about = "Keeps Cilium CiliumLoadBalancerIPPools equal to the addresses of the Hetzner servers (Cloud and dedicated) that should serve, and moves Floating IPs to a healthy server.",
    long_about = "Keeps one or more Cilium CiliumLoadBalancerIPPools equal to the addresses of Hetzner servers. \
Each pool takes the Cloud servers that match its own label selector, and the dedicated (Robot) servers it names, \
with the address kinds it lists (public-ipv4, public-ipv6, private-ipv4, floating-ip, robot-additional-ip, \
robot-failover-ip); servers whose Nodes are going away are left out. A failover pool moves its Floating IPs \
to a healthy member when their holder fails. Without Pools in the configuration it keeps one pool of public \
IPv4s, as the Go version did. Settings come from config.json and CANADA_KAKTUS_* environment variables; \
see docs/reference/settings.md."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Path of config.json [env: CANADA_KAKTUS_CONFIG; else ./config.json if present]
    #[arg(long, value_name = "PATH", global = true)]
    pub config: Option<PathBuf>,
    /// Run one reconcile and exit: 0 on success, 1 on failure.
    #[arg(long, conflicts_with = "dry_run")]
    pub once: bool,
    /// List Hetzner, render every pool and print them; touches no cluster.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format of --dry-run.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Yaml, requires = "dry_run")]
    pub output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Yaml,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Checks the setup and says what to fix; reads only
    ///
    /// Configuration, Hetzner, Kubernetes, Cilium, the pools, the Nodes and
    /// the leader. Exit 0 when nothing failed (warnings do not fail), 1 when
    /// something did, 2 for an invalid configuration.
    Check(CheckArgs),
    /// Says why each address of each server is in a pool or not
    ///
    /// The controller's own decision on what it reads now (Hetzner, the
    /// Nodes, every pool): the node rule, the pool that has the address,
    /// the guard that holds a write, a Floating IP's holder. With ADDRESS,
    /// only that address: which pool takes it and why, or which server or
    /// Floating IP has it and why no pool does. Reads only.
    Explain(ExplainArgs),
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Only this address (IPv4 or IPv6), of any server, Robot server or
    /// Floating IP.
    #[arg(value_name = "ADDRESS")]
    pub address: Option<std::net::IpAddr>,
    /// Only this pool.
    #[arg(long, value_name = "NAME")]
    pub pool: Option<String>,
    /// Only this server (its name or ID).
    #[arg(long, value_name = "NAME|ID")]
    pub server: Option<String>,
    /// Text for people, JSON for machines.
    #[arg(long, short = 'o', value_enum, default_value_t = Report::Text)]
    pub output: Report,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Text for people, JSON for machines.
    #[arg(long, short = 'o', value_enum, default_value_t = Report::Text)]
    pub output: Report,
    /// The namespace Cilium runs in (its cilium-config and operator).
    #[arg(long, default_value = "kube-system", value_name = "NAMESPACE")]
    pub cilium_namespace: String,
    /// The controller's namespace, for its leader Lease [env:
    /// CANADA_KAKTUS_LEASE_NAMESPACE, else POD_NAMESPACE, else the
    /// kubeconfig's]
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// Output of `check` (and `explain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Report {
    Text,
    Json,
}

pub async fn run(cli: Cli) -> ExitCode {
    let env: HashMap<String, String> = std::env::vars().collect();
    // `--config` goes with every command; the controller's own flags with
    // none (clap would refuse `--config` before a command if told so).
    if cli.command.is_some() && (cli.once || cli.dry_run) {
        eprintln!("canada-kaktus: --once and --dry-run cannot be combined with a command");
        return ExitCode::from(EXIT_CONFIG);
    }
    match cli.command {
        Some(Command::Check(args)) => return check(cli.config, env, args).await,
        Some(Command::Explain(args)) => return explain(cli.config, &env, args).await,
        None => {}
    }
    let settings = match config::load(cli.config.as_deref(), &env) {
        Ok(settings) => settings,
        Err(errors) => {
            eprintln!("canada-kaktus: invalid configuration:\n{errors}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let log = start(&settings);

    if cli.dry_run {
        return dry_run(&settings, cli.output).await;
    }
    let Some(clients) = connect(&settings).await else {
        return ExitCode::FAILURE;
    };

    if cli.once {
        return once(&settings, clients).await;
    }
    run_controller(settings, clients, cli.config, env, log).await
}

/// `check`: the report on stdout, the exit code from its worst finding.
async fn check(config: Option<PathBuf>, env: HashMap<String, String>, args: CheckArgs) -> ExitCode {
    crate::sync::install_crypto_provider();
    let mut loaded = config::load(config.as_deref(), &env);
    // The flag wins over LeaseNamespace and POD_NAMESPACE.
    if let (Some(namespace), Ok(settings)) = (args.namespace, loaded.as_mut()) {
        settings.operate.lease_namespace = Some(namespace);
    }
    let options = crate::check::Options {
        cilium_namespace: args.cilium_namespace,
    };
    let report = crate::check::check(&loaded, &env, &options).await;
    let text = match args.output {
        Report::Text => report.text(),
        Report::Json => report.json(),
    };
    if !write_stdout(&text) {
        return ExitCode::FAILURE;
    }
    if loaded.is_err() {
        ExitCode::from(EXIT_CONFIG)
    } else if report.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `explain`: the answer on stdout; 1 when something could not be read,
/// 2 for an invalid configuration or an unknown `--pool`.
async fn explain(
    config: Option<PathBuf>,
    env: &HashMap<String, String>,
    args: ExplainArgs,
) -> ExitCode {
    let settings = match config::load(config.as_deref(), env) {
        Ok(settings) => settings,
        Err(errors) => {
            eprintln!("canada-kaktus: invalid configuration:\n{errors}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(pool) = &args.pool {
        if !settings.pools.iter().any(|p| &p.name == pool) {
            let names: Vec<_> = settings.pools.iter().map(|p| p.name.as_str()).collect();
            eprintln!(
                "canada-kaktus explain: --pool {pool}: no such pool in this configuration (its pools: {})",
                names.join(", ")
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    }
    crate::sync::install_crypto_provider();
    let filter = crate::explain::Filter {
        pool: args.pool,
        server: args.server,
        address: args.address,
    };
    let answer = match crate::explain::read_and_explain(&settings, &filter).await {
        Ok(answer) => answer,
        Err(crate::explain::ExplainError::Read(error)) => {
            eprintln!(
                "canada-kaktus explain: {error}; nothing is explained from part of the state"
            );
            return ExitCode::FAILURE;
        }
        Err(unknown) => {
            eprintln!("canada-kaktus explain: {unknown}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(server) = &filter.server {
        if answer.pools.iter().all(|p| p.servers.is_empty()) {
            eprintln!(
                "canada-kaktus explain: --server {server}: no server of that name or ID is matched by the LabelSelector of {}",
                filter.pool.as_deref().map_or("any pool".to_owned(), |p| format!("pool {p}"))
            );
            return ExitCode::FAILURE;
        }
    }
    let text = match args.output {
        Report::Text => answer.text(),
        Report::Json => answer.json(),
    };
    if !write_stdout(&text) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Starts logging, reports the configuration's warnings, installs the TLS
/// crypto provider and says what starts.
fn start(settings: &Settings) -> telemetry::LogControl {
    let log = telemetry::init(settings.log_level, settings.log_format);
    for warning in &settings.warnings {
        warn!(%warning, "config");
    }
    for notice in &settings.notices {
        info!(%notice, "config");
    }
    crate::sync::install_crypto_provider();
    info!(
        version = env!("CARGO_PKG_VERSION"),
        label_selector = %shared_selector(&settings.pools).unwrap_or_else(|| "(one per pool)".into()),
        pool = %settings.pools.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(","),
        interval_seconds = settings.interval.as_secs(),
        config_file = %settings.config_file.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "none".into()),
        "starting canada-kaktus"
    );
    log
}

/// The process's clients ([`Clients`]), or `None` (and why, logged)
/// when they cannot be built.
async fn connect(settings: &Settings) -> Option<Clients> {
    match world::connect(settings).await {
        Ok(clients) => Some(clients),
        Err(ConnectError::Kubernetes(e)) => {
            error!(
                error = %e,
                "no usable Kubernetes configuration (in-cluster, KUBECONFIG or ~/.kube/config); \
                 to see the pools without a cluster, run canada-kaktus --dry-run"
            );
            None
        }
        Err(ConnectError::Hetzner(e)) => {
            error!(error = %e, "cannot build the Hetzner client");
            None
        }
    }
}

/// `--once`: one full reconcile; success only when every pool reconciled.
async fn once(settings: &Settings, clients: Clients) -> ExitCode {
    // No watch: the Nodes are listed once, before anything is decided.
    // Without that list nothing is added (removals still go).
    let nodes = match world::read_nodes(&clients.kube, &clients.kube_url, settings).await {
        Ok(nodes) => nodes,
        Err(e) => {
            warn!(error = %e, "listing Nodes failed; no address is added");
            NodeView::new([], false)
        }
    };
    let input = CycleInput::with_nodes(nodes);
    let mut reconciler = Reconciler::new(clients).single_cycle();
    let outcomes = match bounded(reconciler.full(settings, &input)).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
            error!(error = %e, cause = e.metric_label(), "reconcile failed; pool left unchanged");
            return ExitCode::FAILURE;
        }
    };
    let mut code = ExitCode::SUCCESS;
    for outcome in outcomes {
        match outcome.result {
            Ok(report) => info!(
                pool = %report.pool,
                addresses = report.addresses,
                written = report.written.is_some(),
                "reconcile finished"
            ),
            Err(e) => {
                error!(pool = %outcome.pool, error = %e, cause = e.metric_label(), "reconcile failed; pool left unchanged");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

/// The controller: the health server and the control loop, until a
/// termination signal ends both; failure when the health server failed.
async fn run_controller(
    settings: Settings,
    clients: Clients,
    cli_config: Option<PathBuf>,
    env: HashMap<String, String>,
    log: telemetry::LogControl,
) -> ExitCode {
    let listener = match http::bind(settings.listen_address).await {
        Ok(listener) => listener,
        Err(e) => {
            error!(error = %e, "cannot start the health server");
            return ExitCode::FAILURE;
        }
    };
    let controller = ControlLoop::new(settings, clients, cli_config, env).with_log(log);
    if let Ok(address) = listener.local_addr() {
        // With port 0 the kernel picks one; this line says which.
        info!(address = %address, "health server listening");
    }
    let shutdown = controller.shutdown_token();
    let server = tokio::spawn(http::serve(
        listener,
        http::router(controller.health(), controller.metrics()),
        shutdown.clone().cancelled_owned(),
    ));
    let signal_token = shutdown.clone();
    tokio::spawn(async move {
        run::shutdown_signal().await;
        info!("termination signal received");
        signal_token.cancel();
    });

    controller.run().await;
    shutdown.cancel();
    match server.await {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            error!(error = %e, "health server failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            error!(error = %e, "health server task failed");
            ExitCode::FAILURE
        }
    }
}

/// `--once` and `--dry-run` are bounded like a cycle of the loop, so a slow
/// API cannot keep them running.
async fn bounded<T>(
    work: impl std::future::Future<Output = Result<T, reconcile::ReconcileError>>,
) -> Result<T, reconcile::ReconcileError> {
    world::within(LoopTimings::default().cycle_timeout, work).await
}

async fn dry_run(settings: &Settings, output: Output) -> ExitCode {
    let hetzner = match world::hetzner_client(settings) {
        Ok(hetzner) => hetzner,
        Err(e) => {
            error!(error = %e, "cannot build the Hetzner client");
            return ExitCode::FAILURE;
        }
    };
    let listing = match bounded(world::read_listing(&hetzner, settings)).await {
        Ok(listing) => listing,
        Err(e) => {
            error!(error = %e, cause = e.metric_label(), "dry run failed");
            return ExitCode::FAILURE;
        }
    };
    let Some(pools) = render_without_cluster(settings, &listing) else {
        return ExitCode::FAILURE;
    };
    print_pools(settings, output, &pools)
}

/// Every pool rendered from `listing` as it would be written, or `None`
/// (and why, logged) when one of them would not be.
fn render_without_cluster(
    settings: &Settings,
    listing: &reconcile::Listing,
) -> Option<Vec<DesiredPool>> {
    // Without a cluster there are no Nodes: the node rules are not applied,
    // nor a selector on Node labels (the pool shows every server its other
    // selectors choose; for Robot.NodeSelector every Robot server).
    let mut unbound = settings.clone();
    for pool in &mut unbound.pools {
        if pool.nodes != NodeRules::default() {
            info!(pool = %pool.name, "dry run: the pool's node rules are not applied (no cluster)");
            pool.nodes = NodeRules::default();
        }
        if pool.reads_node_labels() {
            info!(
                pool = %pool.name,
                "dry run: NodeSelector is not applied (no cluster): the pool shows every server \
                 its other selectors choose"
            );
            pool.node_selector = None;
        }
        if let Some(robot) = pool.robot.as_mut().filter(|r| r.node_selector.is_some()) {
            robot.node_selector = None;
            robot.servers = listing
                .robot
                .servers()
                .iter()
                .filter_map(|s| s.robot_number().map(RobotRef::Number))
                .collect();
        }
    }
    let rendered = reconcile::render_pools(
        &unbound,
        listing,
        &NodeView::default(),
        &mut Unhealthy::default(),
        tokio::time::Instant::now(),
    );
    let mut pools = Vec::with_capacity(rendered.len());
    for (
        reconcile::RenderedPool {
            members,
            desired,
            verdict,
            ..
        },
        pool,
    ) in rendered.into_iter().zip(&settings.pools)
    {
        match verdict {
            // Without its Node-label selector the pool may lose every
            // server to an earlier pool: no answer, not a failure.
            Err(e) if pool.reads_node_labels() => {
                warn!(
                    pool = %desired.name,
                    error = %e,
                    "dry run: the pool is not shown; without the Nodes its NodeSelector cannot \
                     choose (explain, with a cluster, shows it)"
                );
                continue;
            }
            Err(e) => {
                error!(pool = %desired.name, error = %e, cause = e.metric_label(), "dry run failed");
                return None;
            }
            Ok(()) => {}
        }
        info!(
            pool = %desired.name,
            servers_matched = members.servers_matched,
            servers_skipped = members.without_address,
            hetzner_requests = listing.requests,
            addresses = desired.addresses.len(),
            "dry run: rendered the pool; nothing was written"
        );
        pools.push(desired);
    }
    Some(pools)
}

/// Prints the pools' manifests to stdout in `output`'s format.
fn print_pools(settings: &Settings, output: Output, pools: &[DesiredPool]) -> ExitCode {
    // Without a cluster there is no discovery: show the preferred version.
    let version = candidate_versions(settings.cilium_api_version)[0];
    let api_version = format!("{}/{version}", crate::pool::POOL_GROUP);
    let manifests: Vec<_> = pools.iter().map(|p| p.apply_body(&api_version)).collect();
    // One pool prints as one object, as it always did; `Pools` prints a
    // YAML stream or a JSON list.
    let text = match (output, settings.pools_listed) {
        (Output::Json, false) => serde_json::to_string_pretty(&manifests[0])
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        (Output::Json, true) => serde_json::to_string_pretty(&manifests)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        (Output::Yaml, _) => manifests
            .iter()
            .map(serde_yaml_ng::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map(|docs| docs.join("---\n"))
            .map_err(|e| e.to_string()),
    };
    match text {
        Ok(text) if write_stdout(&text) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            error!(error = %e, "cannot print the pool");
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to stdout whole; `false` when it could not (a closed pipe).
fn write_stdout(text: &str) -> bool {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
        .is_ok()
}
