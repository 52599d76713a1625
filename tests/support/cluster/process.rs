//! The plumbing of a test cluster: kubeconfig files, service-account keys,
//! free ports, tokens and the child processes that die with the test.

use super::*;
use std::{
    fs, io,
    net::TcpListener,
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{mpsc, OnceLock},
};

use kube::{
    config::{KubeConfigOptions, Kubeconfig},
    Client, Config,
};
use serde_json::json;

pub(super) async fn try_client_from_kubeconfig(path: &Path) -> Result<Client, String> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

pub(super) fn write_kubeconfig(path: &Path, server: &str, ca_pem: &[u8], user: &str, token: &str) {
    let ca_data = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "test",
            "cluster": { "server": server, "certificate-authority-data": ca_data },
        }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{
            "name": "test",
            "context": { "cluster": "test", "user": user, "namespace": "default" },
        }],
        "current-context": "test",
    });
    let text = serde_yaml_ng::to_string(&kubeconfig).expect("serialising a kubeconfig");
    // Staged, then renamed: a controller started a moment ago may be
    // reading the same file, and must never see it half written.
    let staged = path.with_extension("staged");
    fs::write(&staged, text).unwrap_or_else(|e| panic!("writing {}: {e}", staged.display()));
    fs::rename(&staged, path).unwrap_or_else(|e| panic!("renaming to {}: {e}", path.display()));
}

/// A port that was free a moment ago (the OS picks it).
pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding 127.0.0.1:0")
        .port()
}

pub(super) fn random_token() -> String {
    use rand::Rng as _;
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh ECDSA P-256 key pair as PEM: the private key (PKCS#8), with which
/// kube-apiserver signs service-account tokens (ES256), and the public key
/// (SubjectPublicKeyInfo), with which it verifies them. kube-apiserver does
/// not read a public key out of a PKCS#8 file, hence two files.
pub(super) fn service_account_key_pems() -> (String, String) {
    use ring::{
        rand::SystemRandom,
        signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING},
    };
    // DER of SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING
    // (65 bytes follow) }: the fixed start of every P-256 SubjectPublicKeyInfo.
    const P256_SPKI_PREFIX: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .expect("generating an ECDSA key");
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .expect("reading back the ECDSA key");
    let point = pair.public_key().as_ref();
    assert_eq!(point.len(), 65, "an uncompressed P-256 point");
    let spki = [&P256_SPKI_PREFIX[..], point].concat();
    (pem("PRIVATE KEY", pkcs8.as_ref()), pem("PUBLIC KEY", &spki))
}

pub(super) fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

pub(super) fn log_tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Starts `cmd` with stdout and stderr appended to `log`, so that it is
/// killed when the test process dies.
pub(super) fn spawn_logged(mut cmd: Command, log: &Path) -> Child {
    let file = fs::File::create(log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
    let err = file.try_clone().expect("cloning a file handle");
    cmd.stdin(Stdio::null()).stdout(file).stderr(err);
    let program = cmd.get_program().to_string_lossy().into_owned();
    spawn_owned(cmd).unwrap_or_else(|e| panic!("starting {program}: {e}"))
}

/// Spawns `cmd` so that it gets SIGKILL when the test process dies.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
/// not the process, and libtest runs each test on its own short-lived
/// thread. So every child is forked by one helper thread that lives as long
/// as the process.
pub(super) fn spawn_owned(mut cmd: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("test-cluster-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the spawner thread");
        tx
    });

    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}
