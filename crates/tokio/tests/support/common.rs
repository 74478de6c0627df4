//! What the TUN and example tests share: a child stopped on drop, a temp directory
//! removed on drop, hyper's client on a ustack connection.

use std::path::PathBuf;
use std::process::Child;

/// A `timeout ...` child, stopped and reaped on drop: SIGTERM, which `timeout` passes on
/// to the command it runs (a SIGKILL would leave that command behind, orphaned).
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// A directory of the test's own under the temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `ustack-tokio-<tag>-<pid>`, empty.
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("ustack-tokio-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// hyper's HTTP/1 client on a ustack connection to `addr`, its connection task spawned;
/// the connect retried while refused (the server may not be listening yet).
pub async fn hyper_client<B>(
    net: &ustack_tokio::Net,
    addr: core::net::SocketAddr,
) -> hyper::client::conn::http1::SendRequest<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = loop {
        match ustack_tokio::TcpStream::connect(net, addr).await {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tokio::time::sleep(core::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}
