//! A TCP relay on loopback between the controller and the fake Hetzner API,
//! for faults below HTTP: the port refusing connections, or a connection
//! reset in the middle of an answer. The controller's endpoint is fixed at
//! start, so faults of the network are made here rather than by pointing it
//! elsewhere.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
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
}

pub struct Relay {
    address: SocketAddr,
    target: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    /// The accept loop.
    accept: Mutex<Option<JoinHandle<()>>>,
    /// The connections being relayed.
    connections: Arc<Mutex<Vec<AbortHandle>>>,
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
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = *mode.lock().unwrap();
                let connection = tokio::spawn(relay(client, target, mode));
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

async fn relay(mut client: TcpStream, target: SocketAddr, mode: Mode) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    match mode {
        Mode::Pass | Mode::Refuse => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
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
