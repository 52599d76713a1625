//! What `check` reads from the cluster, each read on its own (one that
//! fails or is forbidden is reported, and the others still run). Every
//! read is a GET or a LIST; the access reviews create nothing that stays.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

use crate::pool::{POOL_GROUP, POOL_PLURAL};
use crate::world::{bounded, within, READ_LIMIT};

/// Whether `error` is the API server's 404.
fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// The pool CRD's served versions and its storage version; from API
/// discovery (storage unknown) when the CRD may not be read.
pub(super) async fn crd_versions(client: &Client) -> Result<(Vec<String>, Option<String>), String> {
    let name = format!("{POOL_PLURAL}.{POOL_GROUP}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match bounded(crds.get_opt(&name)).await {
        Ok(None) => Ok((Vec::new(), None)),
        Ok(Some(crd)) => {
            let served = crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect();
            let storage = crd
                .spec
                .versions
                .iter()
                .find(|v| v.storage)
                .map(|v| v.name.clone());
            Ok((served, storage))
        }
        Err(_) => {
            let mut served = Vec::new();
            for version in ["v2", "v2alpha1"] {
                let group = format!("{POOL_GROUP}/{version}");
                // A 404 is an answer here (the group does not serve it).
                let asked = within(READ_LIMIT, async {
                    Ok::<_, String>(client.list_api_group_resources(&group).await)
                });
                match asked.await? {
                    Ok(list) if list.resources.iter().any(|r| r.name == POOL_PLURAL) => {
                        served.push(version.to_owned());
                    }
                    Ok(_) => {}
                    Err(error) if not_found(&error) => {}
                    Err(error) => return Err(error.to_string()),
                }
            }
            Ok((served, None))
        }
    }
}

/// One permission the controller needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        write!(f, "{} {}{group}", self.verb, self.resource)?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        if let Some(namespace) = &self.namespace {
            write!(f, " in {namespace}")?;
        }
        Ok(())
    }
}

/// What `check` found of the holder labels' admission policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyRead {
    /// The policy and its binding, each whether it exists.
    Found { policy: bool, binding: bool },
    /// Whoever runs check may not read them (403).
    Forbidden,
    /// The read failed otherwise.
    Failed(String),
}

/// The admission policy `deploy/holder-labels` installs.
pub(super) const HOLDER_POLICY: &str = "canada-kaktus-holder-labels";

/// Whether the ValidatingAdmissionPolicy `name` and its binding of the
/// same name exist.
pub(super) async fn admission_policy(client: &Client, name: &str) -> PolicyRead {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policy = within(READ_LIMIT, found(policies.get_opt(name))).await;
    let binding = within(READ_LIMIT, found(bindings.get_opt(name))).await;
    match (policy, binding) {
        (Ok(policy), Ok(binding)) => PolicyRead::Found { policy, binding },
        (Err(answer), _) | (_, Err(answer)) => answer,
    }
}

/// Whether a `get_opt` found its object, a refusal or failure as a
/// [`PolicyRead`].
async fn found<K>(
    read: impl std::future::Future<Output = Result<Option<K>, kube::Error>>,
) -> Result<bool, PolicyRead> {
    match read.await {
        Ok(object) => Ok(object.is_some()),
        Err(kube::Error::Api(status)) if status.code == 403 => Err(PolicyRead::Forbidden),
        Err(error) => Err(PolicyRead::Failed(error.to_string())),
    }
}

impl From<crate::world::TimedOut> for PolicyRead {
    fn from(timed_out: crate::world::TimedOut) -> Self {
        PolicyRead::Failed(timed_out.to_string())
    }
}

/// Whether the identity that runs the check may do `access`
/// (a `SelfSubjectAccessReview`).
pub(super) async fn allowed(client: &Client, access: &Access) -> Result<bool, String> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(access.verb.to_owned()),
                group: Some(access.group.to_owned()),
                resource: Some(access.resource.to_owned()),
                namespace: access.namespace.clone(),
                name: access.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = bounded(reviews.create(&PostParams::default(), &review)).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// `namespace/cilium-config`'s data (`None`: no such ConfigMap).
pub(super) async fn cilium_config(
    client: &Client,
    namespace: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    Ok(bounded(maps.get_opt("cilium-config"))
        .await?
        .map(|map| map.data.unwrap_or_default()))
}

/// The image of `namespace/cilium-operator`'s first container.
pub(super) async fn operator_image(
    client: &Client,
    namespace: &str,
) -> Result<Option<String>, String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    Ok(bounded(deployments.get_opt("cilium-operator"))
        .await?
        .and_then(|d| d.spec?.template.spec?.containers.into_iter().next()?.image))
}

pub(super) async fn nodes(client: &Client) -> Result<Vec<Node>, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(bounded(nodes.list(&ListParams::default())).await?.items)
}

/// The Lease's holder and how long ago it was renewed.
pub(super) async fn lease(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<(String, Option<Duration>)>, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let Some(lease) = bounded(leases.get_opt(name)).await? else {
        return Ok(None);
    };
    let spec = lease.spec.unwrap_or_default();
    let age = spec
        .renew_time
        .and_then(|t| SystemTime::now().duration_since(SystemTime::from(t.0)).ok());
    Ok(Some((
        spec.holder_identity.unwrap_or_else(|| "nobody".to_owned()),
        age,
    )))
}

/// Each pool's last success, from the `/metrics` of a controller on this
/// host (`kubectl exec` into its pod); `None` when none answers.
pub(super) async fn local_last_success(port: u16) -> Option<BTreeMap<String, f64>> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let text = client.get(url).send().await.ok()?.text().await.ok()?;
    last_success_in(&text)
}

/// Each pool's last success in a `/metrics` text; `None` when the text is
/// not canada-kaktus's (something else may listen on that port).
pub(super) fn last_success_in(text: &str) -> Option<BTreeMap<String, f64>> {
    if !text
        .lines()
        .any(|l| l.starts_with("canada_kaktus_build_info{"))
    {
        return None;
    }
    let prefix = "canada_kaktus_last_success_timestamp_seconds{pool=\"";
    Some(
        text.lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(prefix)?;
                let (pool, value) = rest.split_once("\"}")?;
                Some((pool.to_owned(), value.trim().parse().ok()?))
            })
            .collect(),
    )
}
