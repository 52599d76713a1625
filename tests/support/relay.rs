//! A TCP relay on loopback between the controller and a server (the fake
//! Hetzner API, or the kube-apiserver: TLS passes through untouched), for
//! faults below HTTP: the port refusing connections, a connection reset in
//! the middle of an answer, connections that go dark without an error
//! (frozen), and new ones that are never answered (black-holed). The
//! controller's endpoints are fixed at start, so faults of the network are
//! made here rather than by pointing it elsewhere.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

/// What the relay does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Relay both ways.
    Pass,
    /// Nothing listens on the port: connecting is refused.
    Refuse,
    /// Relay the request, then only this many bytes of the answer, then
    /// reset the connection (RST), as a broken network path does.
    ResetAfter(usize),
    /// Accept the connection and never answer: nothing reaches the server,
    /// the client's bytes are read and dropped, the connection stays open
    /// until the client closes it (a path that drops packets).
    BlackHole,
}

/// What every connection shares: which of them are frozen, which still
/// relay, how many were black-holed.
#[derive(Clone)]
struct Dark {
    /// Connections accepted before this generation are frozen.
    frozen_before: watch::Sender<u64>,
    /// Connections black-holed so far.
    black_holed: Arc<AtomicUsize>,
    /// Connections relaying, by the generation they were accepted in.
    passing: Arc<Mutex<BTreeMap<u64, usize>>>,
}

/// A relaying connection, counted out of `Dark::passing` when dropped.
struct Passing(Arc<Mutex<BTreeMap<u64, usize>>>, u64);

impl Drop for Passing {
    fn drop(&mut self) {
        *self.0.lock().unwrap().entry(self.1).or_default() -= 1;
    }
}

impl Dark {
    /// Counts a relaying connection of generation `born` in, and out when
    /// the guard goes (however its task ends).
    fn passing(&self, born: u64) -> Passing {
        *self.passing.lock().unwrap().entry(born).or_default() += 1;
        Passing(self.passing.clone(), born)
    }

    /// Connections accepted before generation `generation` still relaying.
    fn passing_before(&self, generation: u64) -> usize {
        self.passing
            .lock()
            .unwrap()
            .range(..generation)
            .map(|(_, n)| n)
            .sum()
    }
}

pub struct Relay {
    address: SocketAddr,
    target: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    /// The accept loop.
    accept: Mutex<Option<JoinHandle<()>>>,
    /// The connections being relayed.
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    dark: Dark,
}

impl Relay {
    /// A relay to `target` on a free loopback port, relaying.
    pub fn start(target: SocketAddr) -> Relay {
        let listener = listen("127.0.0.1:0".parse().unwrap());
        let address = listener.local_addr().unwrap();
        let relay = Relay {
            address,
            target,
            mode: Arc::new(Mutex::new(Mode::Pass)),
            accept: Mutex::new(None),
            connections: Arc::default(),
            dark: Dark {
                frozen_before: watch::Sender::new(0),
                black_holed: Arc::default(),
                passing: Arc::default(),
            },
        };
        relay.serve(listener);
        relay
    }

    /// The Hetzner endpoint through this relay.
    pub fn endpoint(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The kube-apiserver through this relay (its certificate names
    /// 127.0.0.1, whatever the port).
    pub fn https_url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// Every connection open now goes dark: nothing more passes either way,
    /// and it stays open (no FIN, no RST) until its client gives up on it.
    /// New connections meet the mode, as before. Returns, once every one of
    /// them is dark, how many it froze.
    pub async fn freeze_open(&self) -> usize {
        self.dark.frozen_before.send_modify(|g| *g += 1);
        let generation = *self.dark.frozen_before.borrow();
        let frozen = self.dark.passing_before(generation);
        while self.dark.passing_before(generation) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        frozen
    }

    /// New connections meet `mode`; open ones are left as they are (frozen
    /// ones stay frozen). [`Relay::set`] closes them instead.
    pub fn admit(&self, mode: Mode) {
        assert_ne!(mode, Mode::Refuse, "admit keeps the port open");
        *self.mode.lock().unwrap() = mode;
    }

    /// How many new connections were black-holed so far.
    pub fn black_holed(&self) -> usize {
        self.dark.black_holed.load(Ordering::SeqCst)
    }

    /// Switches the mode; open connections are closed, so the next request
    /// meets the new mode.
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
        let mut accept = self.accept.lock().unwrap();
        if mode == Mode::Refuse {
            if let Some(task) = accept.take() {
                task.abort();
            }
        } else if accept.is_none() {
            drop(accept);
            self.serve(listen(self.address));
        }
    }

    fn serve(&self, listener: TcpListener) {
        let mode = self.mode.clone();
        let connections = self.connections.clone();
        let target = self.target;
        let dark = self.dark.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = *mode.lock().unwrap();
                let connection = tokio::spawn(relay(client, target, mode, dark.clone()));
                let mut open = connections.lock().unwrap();
                open.retain(|c| !c.is_finished());
                open.push(connection.abort_handle());
            }
        });
        *self.accept.lock().unwrap() = Some(task);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.set(Mode::Refuse);
    }
}

/// A listener on `address` that may take over a port just closed.
fn listen(address: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(address).unwrap();
    socket.listen(64).unwrap()
}

async fn relay(mut client: TcpStream, target: SocketAddr, mode: Mode, dark: Dark) {
    if mode == Mode::BlackHole {
        dark.black_holed.fetch_add(1, Ordering::SeqCst);
        let passing = dark.passing(u64::MAX);
        return hold_dark(client, passing).await;
    }
    let born = *dark.frozen_before.borrow();
    let passing = dark.passing(born);
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    match mode {
        Mode::Pass | Mode::Refuse | Mode::BlackHole => {
            let mut frozen = dark.frozen_before.subscribe();
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                true = async { frozen.wait_for(|g| *g > born).await.is_ok() } => {
                    drop(server);
                    hold_dark(client, passing).await;
                }
            }
        }
        Mode::ResetAfter(limit) => {
            let (mut client_read, mut client_write) = client.split();
            let (mut server_read, mut server_write) = server.split();
            let upstream = tokio::io::copy(&mut client_read, &mut server_write);
            let downstream = async {
                let mut sent = 0;
                let mut buffer = vec![0u8; 4096];
                while sent < limit {
                    let n = match server_read.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n.min(limit - sent),
                    };
                    if client_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                    sent += n;
                }
                let _ = client_write.flush().await;
            };
            tokio::select! {
                _ = upstream => {}
                _ = downstream => {}
            }
            // Linger 0: closing sends RST instead of FIN (and does not block,
            // which is what the deprecation warns about for other values).
            #[allow(deprecated)]
            let _ = client.set_linger(Some(std::time::Duration::ZERO));
            drop(client);
        }
    }
}

/// Keeps `client` open and unanswered, its bytes read and dropped, until
/// the client closes it.
async fn hold_dark(mut client: TcpStream, passing: Passing) {
    drop(passing);
    let mut buffer = vec![0u8; 4096];
    while let Ok(1..) = client.read(&mut buffer).await {}
}
