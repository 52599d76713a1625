//! The release workflow's signing logic, `scripts/release`, run as the
//! workflow runs it with a stand-in `cosign` that records its calls: a
//! release tag is signed, attested and verified, or it fails before anything
//! is built; a build of a branch without a key says it is unsigned; the key
//! never appears on a command line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const IMAGE: &str = "ghcr.io/canada-kaktus/canada-kaktus@sha256:\
    1111111111111111111111111111111111111111111111111111111111111111";
const TAGS: [&str; 2] = [
    "ghcr.io/canada-kaktus/canada-kaktus:2.1.0",
    "ghcr.io/canada-kaktus/canada-kaktus:2.1",
];
/// What tagging the image calls.
const TAGGING: &str = "docker buildx imagetools create --prefer-index=false \
    --tag ghcr.io/canada-kaktus/canada-kaktus:2.1.0 \
    --tag ghcr.io/canada-kaktus/canada-kaktus:2.1 \
    ghcr.io/canada-kaktus/canada-kaktus@sha256:\
    1111111111111111111111111111111111111111111111111111111111111111";
const KEY: &str = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY----- secret-key-material";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/release")
}

/// A folder with a stand-in cosign (logging each call's arguments to
/// `calls`, failing the subcommand named in FAKE_COSIGN_FAIL), an SBOM, a
/// provenance file and, if asked, a public key.
struct Rig {
    dir: tempfile::TempDir,
}

impl Rig {
    fn new(public_key: bool) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        // cosign `public-key` prints FAKE_PUBLIC_KEY (default: the
        // committed one); docker's calls are logged with "docker " before.
        let cosign = "#!/usr/bin/env bash\n\
             printf '%s\\n' \"$*\" >> \"$(dirname \"$0\")/calls\"\n\
             if [ \"$1\" = \"${FAKE_COSIGN_FAIL:-}\" ]; then echo \"$1 failed\" >&2; exit 1; fi\n\
             if [ \"$1\" = public-key ]; then printf '%s\\n' \"${FAKE_PUBLIC_KEY:-PUBLIC KEY}\"; fi\n";
        let docker = "#!/usr/bin/env bash\n\
             printf 'docker %s\\n' \"$*\" >> \"$(dirname \"$0\")/calls\"\n";
        for (name, text) in [("cosign", cosign), ("docker", docker)] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(
            dir.path().join("sbom.spdx.json"),
            "{\"spdxVersion\": \"SPDX-2.3\"}",
        )
        .unwrap();
        std::fs::write(dir.path().join("provenance.json"), "{}").unwrap();
        if public_key {
            std::fs::write(dir.path().join("cosign.pub"), "PUBLIC KEY").unwrap();
        }
        Rig { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }

    /// `scripts/release ARGS` on `git_ref`, with `env` added.
    fn run(&self, git_ref: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(script());
        command
            .args(args)
            .env_remove("COSIGN_PRIVATE_KEY")
            .env_remove("COSIGN_PASSWORD");
        // A runner sets these; each test gives its own.
        for name in [
            "GITHUB_SERVER_URL",
            "GITHUB_REPOSITORY",
            "GITHUB_SHA",
            "GITHUB_RUN_ID",
            "GITHUB_RUN_ATTEMPT",
            "GITHUB_WORKFLOW_REF",
            "PLATFORMS",
        ] {
            command.env_remove(name);
        }
        command
            .env("GITHUB_REF", git_ref)
            .env("COSIGN", self.path("cosign"))
            .env("DOCKER", self.path("docker"))
            .env("COSIGN_PUBLIC_KEY", self.path("cosign.pub"));
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    }

    /// `sign-image` of [`IMAGE`], to be tagged [`TAGS`].
    fn sign_image(&self, git_ref: &str, env: &[(&str, &str)]) -> Output {
        let (sbom, provenance) = (self.path("sbom.spdx.json"), self.path("provenance.json"));
        let mut args = vec!["sign-image", IMAGE, &sbom, &provenance];
        args.extend(TAGS);
        self.run(git_ref, &args, env)
    }

    /// Each call of cosign, as its arguments.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The run failed, saying `says`.
fn failed_saying(out: &Output, says: &str) {
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(out).contains(says), "{}", stderr(out));
}

#[test]
fn a_release_tag_without_a_key_fails_before_anything_is_built_or_signed() {
    let rig = Rig::new(true);
    let out = rig.run("refs/tags/v2.1.0", &["preflight"], &[]);
    failed_saying(
        &out,
        "release tag v2.1.0 without a signing key: a release is signed or not made; \
             set the secret COSIGN_PRIVATE_KEY",
    );
    // With the key whose public half is committed, it passes.
    let out = rig.run(
        "refs/tags/v2.1.0",
        &["preflight"],
        &[("COSIGN_PRIVATE_KEY", KEY)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rig.calls(), ["public-key --key env://COSIGN_PRIVATE_KEY"]);

    // Signing on a tag without the key fails too, and calls nothing more.
    let out = rig.sign_image("refs/tags/v2.1.0", &[]);
    failed_saying(&out, "without a signing key");
    assert_eq!(rig.calls(), ["public-key --key env://COSIGN_PRIVATE_KEY"]);
}

#[test]
fn a_release_tag_without_the_committed_public_key_fails() {
    let rig = Rig::new(false);
    let out = rig.run(
        "refs/tags/v2.1.0",
        &["preflight"],
        &[("COSIGN_PRIVATE_KEY", KEY)],
    );
    failed_saying(
        &out,
        "commit the cosign.pub that belongs to COSIGN_PRIVATE_KEY",
    );
    let out = rig.sign_image("refs/tags/v2.1.0", &[("COSIGN_PRIVATE_KEY", KEY)]);
    assert!(!out.status.success(), "{out:?}");
    assert!(rig.calls().is_empty(), "{:?}", rig.calls());
}

#[test]
fn a_key_of_another_pair_or_a_wrong_password_fails_before_the_build() {
    let rig = Rig::new(true);
    let out = rig.run(
        "refs/tags/v2.1.0",
        &["preflight"],
        &[
            ("COSIGN_PRIVATE_KEY", KEY),
            ("FAKE_PUBLIC_KEY", "ANOTHER KEY"),
        ],
    );
    failed_saying(&out, "COSIGN_PRIVATE_KEY does not belong to");
    // cosign cannot open the key (a wrong COSIGN_PASSWORD).
    let out = rig.run(
        "refs/tags/v2.1.0",
        &["preflight"],
        &[
            ("COSIGN_PRIVATE_KEY", KEY),
            ("FAKE_COSIGN_FAIL", "public-key"),
        ],
    );
    failed_saying(&out, "a wrong COSIGN_PASSWORD");
}

#[test]
fn a_release_is_signed_attested_and_verified_with_the_key_never_on_a_command_line() {
    let rig = Rig::new(true);
    let out = rig.sign_image("refs/tags/v2.1.0", &[("COSIGN_PRIVATE_KEY", KEY)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (sbom, provenance, public) = (
        rig.path("sbom.spdx.json"),
        rig.path("provenance.json"),
        rig.path("cosign.pub"),
    );
    assert_eq!(
        rig.calls(),
        [
            format!("sign --yes --key env://COSIGN_PRIVATE_KEY {IMAGE}"),
            format!(
                "attest --yes --key env://COSIGN_PRIVATE_KEY --type spdxjson --predicate {sbom} {IMAGE}"
            ),
            format!(
                "attest --yes --key env://COSIGN_PRIVATE_KEY --type slsaprovenance1 --predicate {provenance} {IMAGE}"
            ),
            format!("verify --key {public} {IMAGE}"),
            format!("verify-attestation --key {public} --type spdxjson {IMAGE}"),
            format!("verify-attestation --key {public} --type slsaprovenance1 {IMAGE}"),
            // Tagged only once verified.
            TAGGING.to_owned(),
        ]
    );
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!printed.contains("secret-key-material"), "{printed}");

    // The chart's artifact: signed and verified the same way.
    let chart = "ghcr.io/canada-kaktus/charts/canada-kaktus@sha256:\
                 2222222222222222222222222222222222222222222222222222222222222222";
    let out = rig.run(
        "refs/tags/v2.1.0",
        &["sign-chart", chart],
        &[("COSIGN_PRIVATE_KEY", KEY)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        rig.calls()[7..],
        [
            format!("sign --yes --key env://COSIGN_PRIVATE_KEY {chart}"),
            format!("verify --key {public} {chart}"),
        ]
    );
}

#[test]
fn a_signature_that_does_not_verify_fails_the_release_untagged() {
    for failing in ["sign", "attest", "verify", "verify-attestation"] {
        let rig = Rig::new(true);
        let out = rig.sign_image(
            "refs/tags/v2.1.0",
            &[("COSIGN_PRIVATE_KEY", KEY), ("FAKE_COSIGN_FAIL", failing)],
        );
        // It stopped at that very call, which failed: not at a usage error.
        failed_saying(&out, &format!("{failing} failed"));
        let calls = rig.calls();
        assert!(
            calls
                .last()
                .is_some_and(|c| c.starts_with(&format!("{failing} "))),
            "{failing}: {calls:?}"
        );
        assert!(
            !calls.iter().any(|c| c.starts_with("docker")),
            "{failing}: tagged anyway: {calls:?}"
        );
    }
}

#[test]
fn a_build_of_main_without_a_key_says_it_is_unsigned() {
    let rig = Rig::new(false);
    let out = rig.run("refs/heads/main", &["preflight"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = rig.sign_image("refs/heads/main", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "not signed: no COSIGN_PRIVATE_KEY (a build of refs/heads/main, not a release tag)"
        ),
        "{}",
        stderr(&out)
    );
    // Tagged (main, sha-…) without a signature.
    assert_eq!(rig.calls(), [TAGGING]);
}

#[test]
fn only_an_image_by_digest_is_signed() {
    let rig = Rig::new(true);
    let (sbom, provenance) = (rig.path("sbom.spdx.json"), rig.path("provenance.json"));
    let out = rig.run(
        "refs/tags/v2.1.0",
        &[
            "sign-image",
            "ghcr.io/canada-kaktus/canada-kaktus:2.1.0",
            &sbom,
            &provenance,
        ],
        &[("COSIGN_PRIVATE_KEY", KEY)],
    );
    failed_saying(&out, "not an image reference by digest");
    assert!(rig.calls().is_empty(), "{:?}", rig.calls());
}

#[test]
fn the_chart_takes_only_an_image_name_by_digest() {
    let rig = Rig::new(false);
    let digest = format!("sha256:{}", "ab".repeat(32));
    for image in [
        format!("a&b/c@{digest}"),
        format!("ghcr.io/x|y/z@{digest}"),
        format!("ghcr.io/Upper/z@{digest}"),
        format!("ghcr.io/x/y\"z@{digest}"),
        "ghcr.io/x/y:2.1.0".to_owned(),
    ] {
        let out = rig.run("refs/tags/v2.1.0", &["chart", "2.1.0", &image], &[]);
        failed_saying(&out, "not an image reference by digest");
    }
}

#[test]
fn the_provenance_names_the_commit_the_workflow_and_the_image() {
    let rig = Rig::new(false);
    let out_file = rig.path("made.json");
    let out = rig.run(
        "refs/tags/v2.1.0",
        &["provenance", IMAGE, &out_file],
        &[
            ("GITHUB_SERVER_URL", "https://git.example.net"),
            ("GITHUB_REPOSITORY", "ops/canada-kaktus"),
            ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
            ("GITHUB_RUN_ID", "42"),
            ("GITHUB_RUN_ATTEMPT", "2"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let made: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let definition = &made["buildDefinition"];
    assert_eq!(definition["externalParameters"]["image"], IMAGE);
    assert_eq!(
        definition["externalParameters"]["workflow"]["ref"],
        "refs/tags/v2.1.0"
    );
    assert_eq!(
        definition["resolvedDependencies"][0]["uri"],
        "git+https://git.example.net/ops/canada-kaktus@refs/tags/v2.1.0"
    );
    assert_eq!(
        definition["resolvedDependencies"][0]["digest"]["gitCommit"],
        "0123456789abcdef0123456789abcdef01234567"
    );
    assert_eq!(
        made["runDetails"]["metadata"]["invocationId"],
        "https://git.example.net/ops/canada-kaktus/actions/runs/42/attempts/2"
    );
    // Without the workflow's variables it says which it needs.
    let out = rig.run("refs/tags/v2.1.0", &["provenance", IMAGE, &out_file], &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("GITHUB_SHA"), "{}", stderr(&out));
}
