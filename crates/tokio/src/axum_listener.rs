//! `axum::serve` on ustack: [`TcpListener`] is an [`axum::serve::Listener`].

use core::net::SocketAddr;
use std::io;

use crate::{TcpListener, TcpStream};

/// `axum::serve(listener, router)` with a ustack listener. An accept error (the stack's
/// loop stopped, a socket table full) is retried at the next wake-up of the listener, as
/// axum's own listener does after a pause.
impl axum::serve::Listener for TcpListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            match TcpListener::accept(self).await {
                Ok(conn) => return conn,
                Err(e) => {
                    eprintln!("ustack-tokio: accept: {e}");
                    // Give the condition time to pass without spinning: the next
                    // readiness of the listener, or a second.
                    pause().await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

/// A one-second pause on tokio's clock.
async fn pause() {
    tokio::time::sleep(core::time::Duration::from_secs(1)).await;
}
