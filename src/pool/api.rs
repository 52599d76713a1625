//! Reading and writing the pool through the Kubernetes API.

use std::sync::{Arc, Mutex};

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::Client;

use crate::config::CiliumApiVersion;
use crate::pool::gate::Approved;
use crate::pool::object::Pool;
use crate::pool::render::{FIELD_MANAGER, POOL_GROUP, POOL_KIND};

pub(crate) const POOL_PLURAL: &str = "ciliumloadbalancerippools";

#[derive(Debug, thiserror::Error)]
pub enum PoolApiError {
    #[error(
        "Cilium LB IPAM is not installed: the API server serves no {POOL_KIND} \
         (looked for {tried}); install Cilium with its CRDs, or set \
         CANADA_KAKTUS_CILIUM_API_VERSION to a version the cluster serves"
    )]
    CrdMissing { tried: String },
    #[error(
        "permission denied to {verb} {POOL_PLURAL}/{name}: {message}; the ServiceAccount \
         needs the ClusterRole in deploy/rbac.yaml (its resourceNames must list the pool name)"
    )]
    Forbidden {
        verb: &'static str,
        name: String,
        message: String,
    },
    #[error(
        "permission denied to list {POOL_PLURAL}: {message}; the ServiceAccount needs list on \
         every {POOL_KIND} (the rule without resourceNames in deploy/rbac.yaml) to keep its \
         pools from overlapping the others"
    )]
    ListForbidden { message: String },
    #[error("the API server refused to {verb} {POOL_PLURAL}/{name} ({code} {reason}): {message}")]
    Rejected {
        verb: &'static str,
        name: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error("cannot reach the Kubernetes API server to {action}: {source}")]
    Unreachable {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl PoolApiError {
    pub fn metric_label(&self) -> &'static str {
        match self {
            PoolApiError::CrdMissing { .. } => "crd_missing",
            PoolApiError::Forbidden { .. } | PoolApiError::ListForbidden { .. } => "kube_forbidden",
            PoolApiError::Rejected { .. } => "kube_rejected",
            PoolApiError::Unreachable { .. } => "kube_unreachable",
        }
    }

    fn from_kube(verb: &'static str, name: &str, error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) if status.code == 403 && verb == "list" => {
                PoolApiError::ListForbidden {
                    message: status.message,
                }
            }
            kube::Error::Api(status) if status.code == 403 => PoolApiError::Forbidden {
                verb,
                name: name.to_owned(),
                message: status.message,
            },
            kube::Error::Api(status) => PoolApiError::Rejected {
                verb,
                name: name.to_owned(),
                code: status.code,
                reason: status.reason,
                message: status.message,
            },
            other => PoolApiError::Unreachable {
                action: verb,
                source: other,
            },
        }
    }
}

/// The API versions to look for, most preferred first.
pub(crate) fn candidate_versions(configured: CiliumApiVersion) -> &'static [&'static str] {
    match configured {
        CiliumApiVersion::Auto => &["v2", "v2alpha1"],
        CiliumApiVersion::V2 => &["v2"],
        CiliumApiVersion::V2Alpha1 => &["v2alpha1"],
    }
}

pub fn pool_resource(version: &str) -> ApiResource {
    ApiResource {
        group: POOL_GROUP.to_owned(),
        version: version.to_owned(),
        api_version: format!("{POOL_GROUP}/{version}"),
        kind: POOL_KIND.to_owned(),
        plural: POOL_PLURAL.to_owned(),
    }
}

/// Asks the API server which pool version it serves. Cilium 1.18+ serves
/// `v2` (and a deprecated `v2alpha1`); older releases serve only `v2alpha1`.
pub async fn discover(
    client: &Client,
    configured: CiliumApiVersion,
) -> Result<ApiResource, PoolApiError> {
    let candidates = candidate_versions(configured);
    for version in candidates {
        match client
            .list_api_group_resources(&format!("{POOL_GROUP}/{version}"))
            .await
        {
            Ok(list) if list.resources.iter().any(|r| r.name == POOL_PLURAL) => {
                return Ok(pool_resource(version));
            }
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                return Err(PoolApiError::Unreachable {
                    action: "discover the Cilium API version",
                    source: error,
                })
            }
        }
    }
    Err(PoolApiError::CrdMissing {
        tried: candidates
            .iter()
            .map(|v| format!("{POOL_GROUP}/{v}"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Reads and applies one cluster-scoped pool, remembering the API version
/// discovery found so a repair does not need to ask again.
pub struct PoolClient {
    client: Client,
    /// Shared with [`PoolClient::resource_reader`].
    discovery: Arc<Mutex<Discovery>>,
}

/// What the last discovery was asked for (the `CiliumApiVersion` setting of
/// the last full cycle, so a reload reaches repairs too) and what it found.
struct Discovery {
    configured: CiliumApiVersion,
    found: Option<ApiResource>,
}

impl PoolClient {
    /// `configured` is the setting at start; every full cycle passes the
    /// current one to [`PoolClient::refresh_resource`].
    pub fn new(client: Client, configured: CiliumApiVersion) -> Self {
        Self {
            client,
            discovery: Arc::new(Mutex::new(Discovery {
                configured,
                found: None,
            })),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs discovery again; called once per full cycle so a Cilium upgrade
    /// (or a CRD installed after start) is picked up without a restart.
    pub async fn refresh_resource(
        &self,
        configured: CiliumApiVersion,
    ) -> Result<ApiResource, PoolApiError> {
        let result = discover(&self.client, configured).await;
        *self.lock() = Discovery {
            configured,
            found: result.as_ref().ok().cloned(),
        };
        result
    }

    /// The version found last, or a fresh discovery (for the setting of the
    /// last full cycle) when there is none.
    pub async fn resource(&self) -> Result<ApiResource, PoolApiError> {
        let configured = {
            let discovery = self.lock();
            if let Some(resource) = &discovery.found {
                return Ok(resource.clone());
            }
            discovery.configured
        };
        self.refresh_resource(configured).await
    }

    pub fn cached_resource(&self) -> Option<ApiResource> {
        self.lock().found.clone()
    }

    /// Reads [`PoolClient::cached_resource`] later, from another task (what
    /// discovery found by then).
    pub fn resource_reader(&self) -> impl Fn() -> Option<ApiResource> + Send + Sync + 'static {
        let discovery = Arc::clone(&self.discovery);
        move || crate::sync::lock(&discovery).found.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Discovery> {
        crate::sync::lock(&self.discovery)
    }

    fn api(&self, resource: &ApiResource) -> Api<Pool> {
        Api::all_with(self.client.clone(), resource)
    }

    /// Every `CiliumLoadBalancerIPPool` in the cluster, ours and the others,
    /// in one read: what the write gate decides from. Each pool's blocks
    /// give back the room their reading grew (up to half of it).
    pub async fn list_all(&self, resource: &ApiResource) -> Result<Vec<Pool>, PoolApiError> {
        let mut pools = self
            .api(resource)
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .map_err(|e| self.classify(resource, "list", "*", e))?;
        for pool in &mut pools {
            pool.spec.blocks.shrink_to_fit();
        }
        Ok(pools)
    }

    /// Server-side apply with `force`: creates the pool when missing, takes
    /// ownership of our fields, and leaves every other manager's fields alone.
    /// Only a write the gate approved is sent.
    pub async fn apply(
        &self,
        resource: &ApiResource,
        approved: &Approved,
    ) -> Result<Pool, PoolApiError> {
        let desired = approved.pool();
        let manifest = desired.apply_body(&resource.api_version);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api(resource)
            .patch(&desired.name, &params, &Patch::Apply(&manifest))
            .await
            .map_err(|e| self.classify(resource, "patch", &desired.name, e))
    }

    /// A 404 on the resource path itself (not on a named object) means the
    /// CRD or that version went away; forget the cached version so the next
    /// attempt rediscovers it.
    fn classify(
        &self,
        resource: &ApiResource,
        verb: &'static str,
        name: &str,
        error: kube::Error,
    ) -> PoolApiError {
        if let kube::Error::Api(status) = &error {
            if status.code == 404 {
                self.lock().found = None;
                return PoolApiError::CrdMissing {
                    tried: resource.api_version.clone(),
                };
            }
        }
        PoolApiError::from_kube(verb, name, error)
    }
}
