//! The CiliumLoadBalancerIPPool CRD in a test cluster: the fixtures under
//! `tests/fixtures/crds/`, installing a CRD (a fixture's or one a Cilium
//! release ships) until discovery serves it, and deleting it.

use super::*;
use std::{
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    api::{DeleteParams, Patch, PatchParams},
    Api,
};

/// Which CiliumLoadBalancerIPPool CRD to install (`tests/fixtures/crds/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdFixture {
    /// Cilium 1.18+: `v2` served and stored, `v2alpha1` served and deprecated.
    V2,
    /// Cilium 1.15–1.17: only `v2alpha1`.
    V2Alpha1Only,
}

impl CrdFixture {
    /// The fixture file.
    pub fn path(self) -> PathBuf {
        let file = match self {
            CrdFixture::V2 => "cilium-v2.yaml",
            CrdFixture::V2Alpha1Only => "cilium-v2alpha1.yaml",
        };
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/crds")
            .join(file)
    }

    /// The versions of `cilium.io` discovery lists once this CRD is installed
    /// (the preferred version first).
    pub fn served_versions(self) -> &'static [&'static str] {
        match self {
            CrdFixture::V2 => &["v2", "v2alpha1"],
            CrdFixture::V2Alpha1Only => &["v2alpha1"],
        }
    }

    /// The version discovery prefers.
    pub fn preferred_version(self) -> &'static str {
        self.served_versions()[0]
    }

    /// The parsed CustomResourceDefinition.
    pub fn crd(self) -> CustomResourceDefinition {
        let path = self.path();
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
    }
}

impl TestCluster {
    /// Installs (server-side applies) a CiliumLoadBalancerIPPool CRD and
    /// waits until it is Established and discovery serves exactly the
    /// fixture's versions with the right preferred version.
    ///
    /// Going from `V2Alpha1Only` to `V2` is an upgrade and works in place;
    /// the other way round the API server refuses to drop the stored `v2`,
    /// so call [`TestCluster::delete_crd`] first.
    pub async fn install_crd(&self, fixture: CrdFixture) {
        self.install_crd_object(fixture.crd(), fixture.served_versions())
            .await;
    }

    /// Applies a CiliumLoadBalancerIPPool CRD (a fixture's, or the one a
    /// Cilium release ships) and waits until discovery serves `served`
    /// (the preferred version first).
    pub async fn install_crd_object(&self, crd: CustomResourceDefinition, served: &[&str]) {
        self.apply_crd(crd)
            .await
            .unwrap_or_else(|e| panic!("applying the CRD serving {served:?}: {e}"));

        let deadline = Instant::now() + CRD_TIMEOUT;
        loop {
            let Err(last) = self.crd_state(served).await else {
                return;
            };
            if Instant::now() > deadline {
                panic!(
                    "the CRD serving {served:?} was not established and served within {CRD_TIMEOUT:?}: {last}\n\
                     --- kube-apiserver log (tail) ---\n{}",
                    self.apiserver_log_tail(40)
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Any other CRD (a Cilium kind the pools do not use): applies it and
    /// waits until it is Established.
    pub async fn install_other_crd(&self, crd: CustomResourceDefinition) {
        let name = crd.metadata.name.clone().expect("a CRD has a name");
        (self.apply_crd(crd).await).unwrap_or_else(|e| panic!("applying the CRD {name}: {e}"));
        let deadline = Instant::now() + CRD_TIMEOUT;
        loop {
            match self.established(&name).await {
                Ok(true) => return,
                state => assert!(
                    Instant::now() < deadline,
                    "the CRD {name} was not Established within {CRD_TIMEOUT:?}: {state:?}"
                ),
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A server-side apply of `crd` as the harness (what the API server
    /// set on a copy read elsewhere left out).
    async fn apply_crd(&self, mut crd: CustomResourceDefinition) -> Result<(), kube::Error> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin_client());
        let name = crd.metadata.name.clone().unwrap_or_default();
        crd.metadata.managed_fields = None;
        crd.metadata.resource_version = None;
        crd.metadata.creation_timestamp = None;
        crd.status = None;
        let apply = PatchParams::apply(HARNESS_MANAGER).force();
        crds.patch(&name, &apply, &Patch::Apply(&crd))
            .await
            .map(|_| ())
    }

    /// Whether the CRD `name` is Established.
    async fn established(&self, name: &str) -> Result<bool, String> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin_client());
        let crd = crds.get(name).await.map_err(|e| e.to_string())?;
        Ok((crd.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }))
    }

    async fn crd_state(&self, want: &[&str]) -> Result<(), String> {
        let client = self.admin_client();
        if !self.established(POOL_CRD_NAME).await? {
            return Err("not Established yet".into());
        }
        let groups = client.list_api_groups().await.map_err(|e| e.to_string())?;
        let group = groups
            .groups
            .iter()
            .find(|g| g.name == "cilium.io")
            .ok_or("cilium.io not in discovery yet")?;
        let served: Vec<&str> = group.versions.iter().map(|v| v.version.as_str()).collect();
        let preferred = group.preferred_version.as_ref().map(|v| v.version.as_str());
        if served != want || preferred != want.first().copied() {
            return Err(format!(
                "discovery serves {served:?} preferring {preferred:?}, want {want:?} (the first preferred)"
            ));
        }
        for version in want {
            let resources = client
                .list_api_group_resources(&format!("cilium.io/{version}"))
                .await
                .map_err(|e| format!("cilium.io/{version}: {e}"))?;
            if !resources
                .resources
                .iter()
                .any(|r| r.name == "ciliumloadbalancerippools")
            {
                return Err(format!(
                    "cilium.io/{version} lists no ciliumloadbalancerippools"
                ));
            }
        }
        Ok(())
    }

    /// Deletes the CiliumLoadBalancerIPPool CRD (and so every pool) and waits
    /// until it and the `cilium.io` group are gone from discovery.
    pub async fn delete_crd(&self) {
        let client = self.admin_client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        match crds.delete(POOL_CRD_NAME, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => panic!("deleting the CRD: {e}"),
        }
        let deadline = Instant::now() + CRD_TIMEOUT;
        loop {
            let crd_gone = matches!(crds.get_opt(POOL_CRD_NAME).await, Ok(None));
            let group_gone = client
                .list_api_groups()
                .await
                .is_ok_and(|g| g.groups.iter().all(|g| g.name != "cilium.io"));
            if crd_gone && group_gone {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "the CRD was still there {CRD_TIMEOUT:?} after deleting it \
                     (CRD gone: {crd_gone}, group gone from discovery: {group_gone})\n\
                     --- kube-apiserver log (tail) ---\n{}",
                    self.apiserver_log_tail(40)
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}
