//! One reconcile against a fake Hetzner API and an in-memory Kubernetes API:
//! what is written, exactly how, and when nothing is.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use canada_kaktus::config::{self, CiliumApiVersion, Settings};
use canada_kaktus::hetzner::{HetznerClient, HetznerOptions, RetryPolicy};
use canada_kaktus::pool::Fence;
use canada_kaktus::pool::WriteReason;
use canada_kaktus::reconcile::{Clients, CycleInput, CycleKind, ReconcileError, Reconciler};
use serde_json::json;
use support::fake_hetzner::{
    numbered_servers, Directive, FakeFloatingIp, FakeHetzner, FakeServer, Fault,
};
use support::fake_kube::FakeKube;
use support::in_process::{quick_options, quick_retry};
use support::single;

const TOKEN: &str = "test-token-4f1c9a";
const PATH_V2: &str = "/apis/cilium.io/v2/ciliumloadbalancerippools/covidnetes-pool";

fn settings(hetzner: &FakeHetzner, extra: &[(&str, &str)]) -> Settings {
    let mut env: HashMap<String, String> = HashMap::from([
        ("CANADA_KAKTUS_HCLOUD_TOKEN".into(), TOKEN.into()),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT".into(), hetzner.endpoint()),
    ]);
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    support::isolate_working_directory();
    config::load(None, &env).expect("valid test settings")
}

fn fast_hetzner(endpoint: String) -> HetznerClient {
    canada_kaktus::sync::install_crypto_provider();
    HetznerClient::new(HetznerOptions {
        connect_timeout: Duration::from_secs(2),
        retry: RetryPolicy {
            max_retries: 2,
            max_rate_limit_wait: Duration::from_millis(50),
            ..quick_retry()
        },
        ..quick_options(endpoint)
    })
    .unwrap()
}

async fn setup(versions: &[&str]) -> (FakeHetzner, FakeKube, Reconciler) {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    let kube = FakeKube::new(versions);
    let reconciler = Reconciler::new(Clients::new(
        kube.client(),
        fast_hetzner(hetzner.endpoint()),
        CiliumApiVersion::Auto,
    ));
    (hetzner, kube, reconciler)
}

#[tokio::test]
async fn a_missing_pool_is_created_with_one_exact_server_side_apply() {
    let (hetzner, kube, mut reconciler) = setup(&["v2", "v2alpha1"]).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "192.168.1.101"),
        FakeServer::new(2, "192.168.1.100"),
        FakeServer::new(3, "192.168.1.100").named("same-address"),
        FakeServer::without_ipv4(4),
    ]);
    let report = single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap();

    assert_eq!(report.kind, CycleKind::Full);
    assert_eq!(report.written, Some(WriteReason::Missing));
    assert_eq!(report.addresses, 2);
    let listing = report.listing.unwrap();
    assert_eq!((listing.servers_matched, listing.servers_skipped), (4, 1));

    let writes = kube.writes();
    assert_eq!(writes.len(), 1, "exactly one write: {writes:?}");
    let patch = &writes[0];
    assert_eq!(patch.method, "PATCH");
    assert_eq!(patch.path, PATH_V2);
    let query: Vec<&str> = patch.query.split('&').collect();
    assert!(query.contains(&"fieldManager=canada-kaktus"), "{query:?}");
    assert!(query.contains(&"force=true"), "{query:?}");
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(
        patch.body,
        Some(json!({
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumLoadBalancerIPPool",
            "metadata": {"name": "covidnetes-pool", "annotations": {"managed-by": "canada-kaktus"}},
            "spec": {"blocks": [{"cidr": "192.168.1.100/32"}, {"cidr": "192.168.1.101/32"}], "disabled": false}
        }))
    );
    assert_eq!(
        hetzner.last_label_selector().as_deref(),
        Some("kops.k8s.io/instance-role=Node")
    );
}

#[tokio::test]
async fn nothing_is_written_when_the_pool_already_matches() {
    let (hetzner, kube, mut reconciler) = setup(&["v2", "v2alpha1"]).await;
    hetzner.set_servers(numbered_servers(3));
    let settings = settings(&hetzner, &[]);
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    let before = kube.pool("covidnetes-pool").unwrap();

    for _ in 0..3 {
        let report = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
        assert_eq!(report.written, None);
        assert!(report.diff.is_empty());
    }
    assert_eq!(kube.writes().len(), 1, "only the first cycle writes");
    assert_eq!(kube.pool("covidnetes-pool").unwrap(), before);
}

#[tokio::test]
async fn servers_joining_and_leaving_are_added_and_removed() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    // One of two addresses going is half the pool, which the shrink guard
    // holds at the default ratio (see a_sudden_drop_is_held_once…); this
    // test is about the diff, so the guard is off.
    let settings = settings(&hetzner, &[("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "1")]);
    hetzner.set_servers(vec![
        FakeServer::new(1, "1.0.0.1"),
        FakeServer::new(2, "1.0.0.2"),
    ]);
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();

    hetzner.set_servers(vec![
        FakeServer::new(2, "1.0.0.2"),
        FakeServer::new(3, "1.0.0.3"),
    ]);
    let report = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    assert_eq!(report.written, Some(WriteReason::BlocksDiffer));
    assert_eq!(
        report.diff.added,
        vec!["1.0.0.3".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(
        report.diff.removed,
        vec!["1.0.0.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(
        kube.pool("covidnetes-pool").unwrap()["spec"]["blocks"],
        json!([{"cidr": "1.0.0.2/32"}, {"cidr": "1.0.0.3/32"}])
    );
}

#[tokio::test]
async fn no_servers_leaves_the_pool_untouched() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    let settings = settings(&hetzner, &[]);
    hetzner.set_servers(numbered_servers(2));
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    let before = kube.pool("covidnetes-pool").unwrap();

    hetzner.set_servers(vec![]);
    let error = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap_err();
    assert!(matches!(error, ReconcileError::Refused(_)), "{error}");
    assert!(
        error
            .to_string()
            .contains("refusing to write an empty pool"),
        "{error}"
    );

    hetzner.set_servers(vec![
        FakeServer::without_ipv4(1),
        FakeServer::without_ipv4(2),
    ]);
    let error = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap_err();
    assert!(matches!(error, ReconcileError::Refused(_)), "{error}");

    assert_eq!(kube.writes().len(), 1);
    assert_eq!(kube.pool("covidnetes-pool").unwrap(), before);
}

#[tokio::test]
async fn a_failed_second_page_leaves_the_pool_untouched() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    let settings = settings(&hetzner, &[]);
    hetzner.set_servers(numbered_servers(120));
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    let before = kube.pool("covidnetes-pool").unwrap();
    assert_eq!(before["spec"]["blocks"].as_array().unwrap().len(), 120);

    // 40 servers are gone, but page 2 fails: nothing may be removed.
    hetzner.set_servers(numbered_servers(80));
    hetzner.set_fault(Some(Fault::FailPage(2, 500)));
    let error = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap_err();
    assert!(matches!(error, ReconcileError::Hetzner(_)), "{error}");
    assert!(error.to_string().contains("pool left unchanged"), "{error}");
    assert_eq!(kube.writes().len(), 1);
    assert_eq!(kube.pool("covidnetes-pool").unwrap(), before);
}

#[tokio::test]
async fn a_bad_token_fails_without_a_write_or_a_leak() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(2));
    hetzner.expect_token("some-other-token");
    let error = single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap_err();
    let text = format!("{error} {error:?}");
    assert!(text.contains("invalid or revoked"), "{text}");
    assert!(!text.contains(TOKEN), "the token leaked: {text}");
    assert!(kube.writes().is_empty());
}

#[tokio::test]
async fn the_v2alpha1_api_is_used_when_v2_is_not_served() {
    let (hetzner, kube, mut reconciler) = setup(&["v2alpha1"]).await;
    hetzner.set_servers(numbered_servers(1));
    let report = single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap();
    assert_eq!(report.api_version, "cilium.io/v2alpha1");
    let writes = kube.writes();
    assert_eq!(
        writes[0].path,
        "/apis/cilium.io/v2alpha1/ciliumloadbalancerippools/covidnetes-pool"
    );
    assert_eq!(
        writes[0].body.as_ref().unwrap()["apiVersion"],
        "cilium.io/v2alpha1"
    );
}

#[tokio::test]
async fn a_configured_api_version_is_used_as_is() {
    let (hetzner, kube, _) = setup(&["v2", "v2alpha1"]).await;
    hetzner.set_servers(numbered_servers(1));
    let settings = settings(
        &hetzner,
        &[("CANADA_KAKTUS_CILIUM_API_VERSION", "v2alpha1")],
    );
    let mut reconciler = Reconciler::new(Clients::new(
        kube.client(),
        fast_hetzner(hetzner.endpoint()),
        settings.cilium_api_version,
    ));
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    assert!(kube.writes()[0]
        .path
        .starts_with("/apis/cilium.io/v2alpha1/"));
}

#[tokio::test]
async fn a_cluster_without_the_crd_says_cilium_lb_ipam_is_missing() {
    let (hetzner, kube, mut reconciler) = setup(&[]).await;
    hetzner.set_servers(numbered_servers(1));
    let error = single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap_err();
    assert_eq!(error.metric_label(), "crd_missing");
    assert!(
        error
            .to_string()
            .contains("Cilium LB IPAM is not installed"),
        "{error}"
    );
    assert!(kube.writes().is_empty());
}

#[tokio::test]
async fn a_forbidden_patch_names_the_rbac_fix() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(1));
    kube.fail_patches(Some(403));
    let error = single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap_err();
    assert_eq!(error.metric_label(), "kube_forbidden");
    assert!(error.to_string().contains("deploy/rbac.yaml"), "{error}");
}

#[tokio::test]
async fn configured_metadata_and_selector_are_applied_and_foreign_metadata_kept() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(1));
    kube.insert_pool(
        "covidnetes-pool",
        json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
            "metadata": {"name": "covidnetes-pool", "annotations": {"argocd.argoproj.io/tracking-id": "app:x"}},
            "spec": {"blocks": [{"cidr": "9.9.9.9/32"}]}
        }),
    );
    let settings = settings(
        &hetzner,
        &[
            ("CANADA_KAKTUS_POOL_ANNOTATIONS", r#"{"team":"net"}"#),
            ("CANADA_KAKTUS_POOL_LABELS", r#"{"tier":"edge"}"#),
            ("CANADA_KAKTUS_POOL_SERVICE_SELECTOR", "color=blue"),
            // The foreign 9.9.9.9 is replaced at once, not held by the shrink guard.
            ("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "1"),
        ],
    );
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    let pool = kube.pool("covidnetes-pool").unwrap();
    assert_eq!(pool["metadata"]["annotations"]["team"], "net");
    assert_eq!(
        pool["metadata"]["annotations"]["managed-by"],
        "canada-kaktus"
    );
    assert_eq!(
        pool["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"],
        "app:x"
    );
    assert_eq!(pool["metadata"]["labels"]["tier"], "edge");
    assert_eq!(
        pool["spec"]["serviceSelector"],
        json!({"matchLabels": {"color": "blue"}})
    );
    assert_eq!(pool["spec"]["blocks"], json!([{"cidr": "10.0.0.1/32"}]));
}

#[tokio::test]
async fn a_repair_reapplies_the_last_listing_without_asking_hetzner() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(2));
    assert!(
        reconciler
            .repair(
                &settings(&hetzner, &[]),
                "covidnetes-pool",
                &CycleInput::default()
            )
            .await
            .unwrap()
            .is_none(),
        "nothing to repair before a listing"
    );
    single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap();
    let good = kube.pool("covidnetes-pool").unwrap();
    let hetzner_requests = hetzner.requests();

    let mut edited = good.clone();
    edited["spec"]["blocks"] = json!([{"cidr": "6.6.6.6/32"}]);
    kube.insert_pool("covidnetes-pool", edited);
    let report = reconciler
        .repair(
            &settings(&hetzner, &[]),
            "covidnetes-pool",
            &CycleInput::default(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.kind, CycleKind::Repair);
    assert_eq!(report.written, Some(WriteReason::BlocksDiffer));
    assert_eq!(kube.pool("covidnetes-pool").unwrap()["spec"], good["spec"]);
    assert_eq!(
        hetzner.requests(),
        hetzner_requests,
        "a repair spends no Hetzner request"
    );
}

#[tokio::test]
async fn a_pool_conflict_reported_by_cilium_fails_the_cycle() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(1));
    let settings = settings(&hetzner, &[]);
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    let mut pool = kube.pool("covidnetes-pool").unwrap();
    pool["status"] = json!({"conditions": [{
        "type": "cilium.io/PoolConflict", "status": "True", "reason": "cidr_overlap",
        "message": "Pool overlaps with CIDR of other-pool"
    }]});
    kube.insert_pool("covidnetes-pool", pool);
    let error = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap_err();
    assert_eq!(error.metric_label(), "pool_conflict");
    assert!(error.to_string().contains("other-pool"), "{error}");
    assert_eq!(kube.writes().len(), 1);
}

fn addresses(pool: &serde_json::Value) -> usize {
    pool["spec"]["blocks"].as_array().unwrap().len()
}

#[tokio::test]
async fn a_sudden_drop_is_held_once_then_written_when_confirmed() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    let settings = settings(&hetzner, &[]);
    hetzner.set_servers(numbered_servers(40));
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    assert_eq!(addresses(&kube.pool("covidnetes-pool").unwrap()), 40);

    // 40 → 3, plus one new server: the addition goes through, the removal waits.
    let mut servers = numbered_servers(3);
    servers.push(FakeServer::new(99, "203.0.113.99"));
    hetzner.set_servers(servers);
    let report = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    let held = report.held.clone().expect("the removal is held");
    assert_eq!(held.addresses.len(), 37);
    assert_eq!(report.written, Some(WriteReason::BlocksDiffer));
    assert_eq!(
        report.diff.added,
        vec!["203.0.113.99".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert!(report.diff.removed.is_empty());
    assert_eq!(addresses(&kube.pool("covidnetes-pool").unwrap()), 41);

    // A repair while holding keeps the held addresses too.
    let mut edited = kube.pool("covidnetes-pool").unwrap();
    edited["spec"]["blocks"] = json!([]);
    kube.insert_pool("covidnetes-pool", edited);
    reconciler
        .repair(&settings, "covidnetes-pool", &CycleInput::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(addresses(&kube.pool("covidnetes-pool").unwrap()), 41);

    let report = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    assert_eq!(report.held, None);
    assert_eq!(report.confirmed.map(|c| c.addresses.len()), Some(37));
    assert_eq!(report.diff.removed.len(), 37);
    assert_eq!(addresses(&kube.pool("covidnetes-pool").unwrap()), 4);
}

#[tokio::test]
async fn blocked_addresses_are_kept_by_default_and_dropped_on_request() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "203.0.113.1"),
        FakeServer::new(2, "203.0.113.2").blocked(),
    ]);
    let report = single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap();
    assert_eq!(
        report.listing.unwrap().blocked,
        vec!["203.0.113.2".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(addresses(&kube.pool("covidnetes-pool").unwrap()), 2);

    // Dropping one of two addresses is half the pool: the shrink guard would
    // hold it at the default ratio, so it is off here.
    let drop = settings(
        &hetzner,
        &[
            ("CANADA_KAKTUS_BLOCKED_ADDRESSES", "drop"),
            ("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "1"),
        ],
    );
    single(reconciler.full(&drop, &CycleInput::default()).await).unwrap();
    assert_eq!(
        kube.pool("covidnetes-pool").unwrap()["spec"]["blocks"],
        json!([{"cidr": "203.0.113.1/32"}])
    );
}

#[tokio::test]
async fn the_configured_request_budget_is_enforced() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(numbered_servers(120));
    let settings = settings(&hetzner, &[("CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET", "10")]);
    let client = canada_kaktus::world::hetzner_client(&settings).unwrap();
    let kube = FakeKube::new(&["v2"]);
    let mut reconciler =
        Reconciler::new(Clients::new(kube.client(), client, CiliumApiVersion::Auto));
    for _ in 0..3 {
        single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    }
    let error = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap_err();
    assert_eq!(error.metric_label(), "budget_exhausted", "{error}");
    assert_eq!(
        hetzner.requests(),
        10,
        "3 listings of 3 pages, then 1 request of the 4th"
    );
    assert_eq!(kube.writes().len(), 1);
}

#[tokio::test]
async fn a_repair_that_must_rediscover_uses_the_api_version_of_the_current_settings() {
    // The pool client was built while CiliumApiVersion was v2; a reload has
    // set it to v2alpha1 since, and the full cycle ran with that.
    let (hetzner, kube, _) = setup(&["v2", "v2alpha1"]).await;
    hetzner.set_servers(numbered_servers(2));
    let mut reconciler = Reconciler::new(Clients::new(
        kube.client(),
        fast_hetzner(hetzner.endpoint()),
        CiliumApiVersion::V2,
    ));
    let reloaded = settings(
        &hetzner,
        &[("CANADA_KAKTUS_CILIUM_API_VERSION", "v2alpha1")],
    );
    single(reconciler.full(&reloaded, &CycleInput::default()).await).unwrap();
    let good = kube.pool("covidnetes-pool").unwrap();

    // Someone edits the pool; the repair's write gets a 404 on the resource,
    // so the client forgets the version it found and must discover again.
    let mut edited = good.clone();
    edited["spec"]["blocks"] = json!([{"cidr": "6.6.6.6/32"}]);
    kube.insert_pool("covidnetes-pool", edited);
    kube.fail_next_patch(404);
    reconciler
        .repair(&reloaded, "covidnetes-pool", &CycleInput::default())
        .await
        .unwrap_err();
    kube.take_requests();

    reconciler
        .repair(&reloaded, "covidnetes-pool", &CycleInput::default())
        .await
        .unwrap()
        .unwrap();
    let writes = kube.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(
        writes[0].path.starts_with("/apis/cilium.io/v2alpha1/"),
        "the repair used the API version the client was built with: {}",
        writes[0].path
    );
    assert_eq!(kube.pool("covidnetes-pool").unwrap()["spec"], good["spec"]);
}

/// The pool is deleted after the cycle read it and before its write, in a
/// cycle that has a write to do (a server joined): the write recreates it
/// whole, with every address and nothing of the deleted object.
#[tokio::test]
async fn a_pool_deleted_between_read_and_write_is_recreated_whole() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    let settings = settings(&hetzner, &[]);
    hetzner.set_servers(numbered_servers(3));
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    // A mark of another manager: gone once the object was deleted.
    let mut pool = kube.pool("covidnetes-pool").unwrap();
    pool["metadata"]["annotations"]["example.com/marker"] = json!("before the delete");
    kube.insert_pool("covidnetes-pool", pool);
    let writes = kube.writes().len();

    hetzner.set_servers(numbered_servers(4));
    // The read's look at the pools, then the write's fresh one.
    kube.delete_pool_after_reads("covidnetes-pool", 2);
    let report = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    assert_eq!(report.written, Some(WriteReason::BlocksDiffer));
    let after = kube.writes();
    assert_eq!(after.len(), writes + 1, "one write");
    let pool = kube.pool("covidnetes-pool").expect("recreated");
    assert_eq!(addresses(&pool), 4, "{pool}");
    assert!(
        pool["metadata"]["annotations"]
            .get("example.com/marker")
            .is_none(),
        "the pool was not deleted and recreated: {pool}"
    );
}

/// Offset paging is not a snapshot. Between the requests for page 1 and
/// page 2, server 3 (on page 1) is deleted and server 61 created: the total
/// stays 60, page 2 starts one server later, and server 51 is on neither
/// page. Its address must not be removed on the word of that listing.
#[tokio::test]
async fn a_page_shift_never_removes_a_server_that_is_still_there() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    let settings = settings(&hetzner, &[]);
    hetzner.set_servers(numbered_servers(60));
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    assert_eq!(addresses(&kube.pool("covidnetes-pool").unwrap()), 60);

    let after: Vec<FakeServer> = numbered_servers(61)
        .into_iter()
        .filter(|s| s.id != 3)
        .collect();
    let mut shifted = false;
    hetzner.set_script(Some(Box::new(move |page| {
        if page == 2 && !shifted {
            shifted = true;
            Directive {
                servers: Some(after.clone()),
                fault: None,
            }
        } else {
            Directive::default()
        }
    })));
    let _ = single(reconciler.full(&settings, &CycleInput::default()).await);
    let pool = kube.pool("covidnetes-pool").unwrap();
    let blocks = pool["spec"]["blocks"].to_string();
    assert!(
        blocks.contains("\"10.0.0.51/32\""),
        "server 51 was removed on a shifted listing: {blocks}"
    );
}

/// An adopted pool of ours holds a range (Services have addresses all over
/// it) and the listing gives three of them: the write would drop 37 of 40
/// addresses. That is a removal like any other (issue 20 review): a second
/// listing must confirm it, and the shrink guard holds it.
#[tokio::test]
async fn a_range_in_our_pool_is_removed_only_through_the_guards() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(3));
    kube.insert_pool(
        "covidnetes-pool",
        json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
            "metadata": {"name": "covidnetes-pool"},
            "spec": {"blocks": [{"start": "10.0.0.1", "stop": "10.0.0.40"}]}
        }),
    );
    let settings = settings(&hetzner, &[("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "0.5")]);
    let report = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    assert_eq!(
        hetzner.requests(),
        2,
        "a removal is confirmed by a second listing"
    );
    let held = report.held.expect("the shrink guard holds the removal");
    assert_eq!(held.addresses.len(), 37);
    // The pool still holds every address of the range.
    let pool = kube.pool("covidnetes-pool").unwrap();
    let blocks = pool["spec"]["blocks"].to_string();
    for n in 1..=40 {
        let single = format!("\"10.0.0.{n}/32\"");
        assert!(
            blocks.contains(&single) || blocks.contains("\"stop\":\"10.0.0.40\""),
            "10.0.0.{n} left the pool without the guards: {blocks}"
        );
    }
}

/// A block of ours too wide to hold address by address (an IPv6 /64 an
/// adopted pool had) cannot be kept while the guards decide: the pool is
/// left as it is, with an error that says what to do.
#[tokio::test]
async fn a_block_too_wide_to_keep_address_by_address_is_never_dropped() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(3));
    let before = json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
        "metadata": {"name": "covidnetes-pool"},
        "spec": {"blocks": [{"cidr": "10.0.0.1/32"}, {"cidr": "2001:db8:5::/64"}]}
    });
    kube.insert_pool("covidnetes-pool", before.clone());
    let settings = settings(&hetzner, &[("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "1")]);
    let error = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("2001:db8:5::/64") && text.contains("by hand"),
        "{text}"
    );
    assert_eq!(
        kube.pool("covidnetes-pool").unwrap()["spec"],
        before["spec"],
        "the pool was written"
    );
}

/// A leader that stopped dead between its read and its write (a paused
/// process, a hung node) wakes with its Lease run out by the clock, before
/// the election has noticed: the write must not go out (issue 20 review).
#[tokio::test]
async fn no_write_goes_out_once_the_lease_has_run_out_by_the_clock() {
    let (hetzner, kube, _) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(2));
    let fence = Fence::closed();
    fence.allow_until(Some(SystemTime::now() - Duration::from_secs(1)));
    let clients = Clients::new(
        kube.client(),
        fast_hetzner(hetzner.endpoint()),
        CiliumApiVersion::Auto,
    );
    let mut reconciler = Reconciler::new(clients.fenced(fence.clone()));
    let error = single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap_err();
    assert_eq!(error.metric_label(), "lease_expired", "{error}");
    assert!(
        kube.pool("covidnetes-pool").is_none(),
        "written without the Lease"
    );

    // Renewed: the same cycle writes.
    fence.allow_until(Some(SystemTime::now() + Duration::from_secs(60)));
    single(
        reconciler
            .full(&settings(&hetzner, &[]), &CycleInput::default())
            .await,
    )
    .unwrap();
    assert!(kube.pool("covidnetes-pool").is_some());
}

/// Someone adds a block too wide to keep address by address to our pool
/// (a GitOps re-sync of an old manifest, say) and Services take addresses
/// from it: the repair that follows the edit must not drop it either.
#[tokio::test]
async fn a_repair_never_drops_a_block_too_wide_to_keep() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(numbered_servers(2));
    let settings = settings(&hetzner, &[]);
    single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
    let mut edited = kube.pool("covidnetes-pool").unwrap();
    edited["spec"]["blocks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"cidr": "2001:db8:5::/64"}));
    kube.insert_pool("covidnetes-pool", edited.clone());
    let error = reconciler
        .repair(&settings, "covidnetes-pool", &CycleInput::default())
        .await
        .expect_err("repaired");
    assert_eq!(error.metric_label(), "wide_block", "{error}");
    assert_eq!(
        kube.pool("covidnetes-pool").unwrap()["spec"],
        edited["spec"]
    );
}

/// Every complete listing's writes hand the failover mover what it shows,
/// also when no pool has failover (any more: a reload turned it off), so
/// the mover never goes on with an older configuration's pools.
/// A full cycle's read and apply, for what the apply hands on.
async fn read_and_apply(
    reconciler: &mut Reconciler,
    settings: &canada_kaktus::config::Settings,
) -> canada_kaktus::reconcile::FullApplied {
    let observed = CycleInput::default();
    let due = canada_kaktus::reconcile::RobotDue::List;
    let read = reconciler
        .read_full(settings, due, &observed)
        .await
        .unwrap();
    reconciler
        .apply_full(settings, read, &observed)
        .await
        .unwrap()
}

#[tokio::test]
async fn every_listing_hands_the_failover_pools_over_also_none() {
    let (hetzner, _kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(vec![FakeServer::new(1, "192.168.1.101")]);
    let settings = settings(&hetzner, &[]);
    let applied = read_and_apply(&mut reconciler, &settings).await;
    assert!(applied.failover.pools.is_empty());
    assert_eq!(applied.outcomes.len(), 1);
}

/// The mover gets only the Floating IPs a failover pool holds after the
/// write: one a foreign pool covers is withheld from the pool, and so it is
/// none of the mover's business (another tool may move it).
#[tokio::test]
async fn a_floating_ip_the_gate_withheld_is_not_handed_to_the_mover() {
    let (hetzner, kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "192.168.1.101").with_label("role", "edge")
    ]);
    hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(10, "203.0.113.10", Some(1)).with_label("pool", "edge"),
        FakeFloatingIp::new(11, "203.0.113.11", Some(1)).with_label("pool", "edge"),
    ]);
    kube.insert_pool(
        "theirs",
        json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
            "metadata": {"name": "theirs"},
            "spec": {"blocks": [{"cidr": "203.0.113.11/32"}]}
        }),
    );
    let pools = r#"[{"Name": "covidnetes-pool", "LabelSelector": "role=edge",
        "Addresses": ["floating-ip"], "FloatingIpSelector": "pool=edge",
        "FloatingIpFailover": true}]"#;
    let settings = settings(&hetzner, &[("CANADA_KAKTUS_POOLS", pools)]);
    let listing = read_and_apply(&mut reconciler, &settings).await.failover;
    let ips: Vec<i64> = listing.pools[0].floating_ips.iter().map(|f| f.id).collect();
    assert_eq!(ips, [10], "only the Floating IP the pool holds");
}

/// A matching server without a usable public IPv4 is said once per cycle
/// (2.0.0 said it twice: the listing's render and the write's).
#[tokio::test]
async fn a_server_without_a_public_ipv4_is_warned_about_once_per_cycle() {
    let logs = support::logs::capture();
    let (hetzner, _kube, mut reconciler) = setup(&["v2"]).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "192.168.1.101"),
        FakeServer::without_ipv4(4),
    ]);
    let settings = settings(&hetzner, &[]);
    for cycle in 1..=2 {
        let report = single(reconciler.full(&settings, &CycleInput::default()).await).unwrap();
        assert_eq!(report.listing.unwrap().servers_skipped, 1);
        let warned = logs
            .mine()
            .iter()
            .filter(|l| l["message"] == "skipping Hetzner server without a usable public IPv4")
            .count();
        assert_eq!(warned, cycle, "after cycle {cycle}");
    }
}
