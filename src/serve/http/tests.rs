use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// Accepts the next connection and hands it to `connections`, as the
/// accept loop does; one whose client `sent` something is waited for until
/// its task has read it.
async fn accept(
    listener: &TcpListener,
    connections: &mut Connections,
    router: &Router,
    sent: bool,
) {
    let (stream, _) = listener.accept().await.unwrap();
    connections.serve(stream, router.clone());
    let heard = connections.open.back().unwrap().heard.clone();
    let read = async {
        while sent && heard.load(std::sync::atomic::Ordering::Relaxed) == heard::NOTHING {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("a connection's task did not read what its client sent within 5 s");
}

/// A probe whose request has not arrived when it is accepted (a client
/// slowed down by a busy node) is not closed to make room for a flood of
/// unfinished requests that came after it: those are closed first.
#[tokio::test(flavor = "current_thread")]
async fn a_probe_still_on_its_way_outlives_a_flood_of_unfinished_requests() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = Router::new().route("/livez", get(|| async { "alive" }));
    let mut connections = Connections::default();

    let mut probe = TcpStream::connect(address).await.unwrap();
    accept(&listener, &mut connections, &router, false).await;
    let mut flood = Vec::new();
    for _ in 0..2 * limits::CONNECTIONS {
        let mut client = TcpStream::connect(address).await.unwrap();
        client
            .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Filler: aaaa")
            .await
            .unwrap();
        accept(&listener, &mut connections, &router, true).await;
        flood.push(client);
    }

    probe
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), probe.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        matches!(read, Ok(Ok(_)))
            && answer.starts_with("HTTP/1.1 200")
            && answer.ends_with("alive"),
        "the probe was not answered beside {} unfinished requests: {read:?}, {answer:?}",
        flood.len()
    );
}
