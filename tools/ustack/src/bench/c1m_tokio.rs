//! `ustack bench c1m --api tokio`: c1m's servers written against tokio, one task per
//! connection, each in a process of its own so that its memory is its own.
//!
//! - ustack (`bench-peer ustack-c1m --api tokio`, [`serve_ustack`]): ustack-tokio's
//!   `LocalStack` (model (b): the stack driven inside a current-thread runtime) over c1m's
//!   shm link, a `LocalTcpListener` on each of c1m's server addresses, a task spawned for
//!   every accepted connection. It answers the bench's commands as the native server does
//!   ([`super::c1m_server`]): `held`, `memory` (the runtime's kinds, and `tasks`: the
//!   tasks' futures), `report` (its MIB; its link's counters are not reachable through
//!   the `LocalStack` and are null).
//! - Linux (`bench-peer tokio-echo`, [`serve_linux`]): the same task on tokio's own
//!   sockets (`tokio::net`, epoll), on a current-thread runtime, in one `SO_REUSEPORT`
//!   group on 127.0.0.1; c1m starts as many as keep each under its open-file limit, as it
//!   does the baseline echo server. It answers `stats` with `accepted N`.
//!
//! The task ([`echo`]) waits for a readable connection holding no buffer (`readable`, then
//! `try_read` into one it allocates then): an idle connection costs its task's future,
//! its socket and the stack's state, which is what c1m measures.

use std::cell::Cell;
use std::future::Future;
use std::io::{self, ErrorKind};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::rc::Rc;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use ustack_dev::shm::ShmPort;
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_stack::inspect::MemoryKind;
use ustack_tokio::local::{LocalStack, LocalTcpListener, LocalTcpStream};

/// The buffer a task reads into once its connection is readable (freed before it waits
/// again).
const ECHO_BUF: usize = 16 * 1024;

/// A connection an idle task can wait on without a buffer: tokio's `readable` and
/// `try_read`, on both stacks.
pub trait IdleRead: AsyncWrite + Unpin {
    fn readable(&self) -> impl Future<Output = io::Result<()>>;
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize>;
}

impl IdleRead for LocalTcpStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> {
        LocalTcpStream::readable(self)
    }
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        LocalTcpStream::try_read(self, buf)
    }
}

impl IdleRead for tokio::net::TcpStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> {
        tokio::net::TcpStream::readable(self)
    }
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        tokio::net::TcpStream::try_read(self, buf)
    }
}

/// One connection's task: echo until the peer closes or the connection fails. While the
/// connection is idle the task holds no buffer.
pub async fn echo<S: IdleRead>(mut s: S) {
    loop {
        if s.readable().await.is_err() {
            return;
        }
        let mut buf = vec![0u8; ECHO_BUF];
        loop {
            match s.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => return,
            }
        }
    }
}

/// Spawn `s`'s [`echo`] task, counted in `held` while it runs; the size of its future.
fn spawn_counted<S: IdleRead + 'static>(s: S, held: &Rc<Cell<usize>>) -> usize {
    held.set(held.get() + 1);
    let task = {
        let held = held.clone();
        async move {
            echo(s).await;
            held.set(held.get() - 1);
        }
    };
    let size = size_of_val(&task);
    tokio::task::spawn_local(task);
    size
}

/// The lines of stdin, read on a thread of their own; the channel closes with stdin.
fn stdin_lines() -> anyhow::Result<mpsc::UnboundedReceiver<String>> {
    let (tx, rx) = mpsc::unbounded_channel();
    super::c1m_server::read_stdin(move |line| tx.send(line).is_ok())?;
    Ok(rx)
}

/// `f()` on a new current-thread runtime inside a `LocalSet`, on this thread.
fn on_local<F: Future<Output = anyhow::Result<()>>>(f: impl FnOnce() -> F) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, f())
}

/// c1m's ustack server on tokio: a `LocalStack` built by `builder` over `port`, listening
/// on `addrs`, until stdin closes (see the module's doc).
pub fn serve_ustack(
    builder: RuntimeBuilder,
    port: ShmPort,
    addrs: &[SocketAddrV4],
) -> anyhow::Result<()> {
    on_local(|| async move {
        let stack = LocalStack::new(builder, port).context("starting the LocalStack")?;
        let held = Rc::new(Cell::new(0usize));
        let task_bytes = Rc::new(Cell::new(0usize));
        for &addr in addrs {
            let listener = LocalTcpListener::bind(&stack, SocketAddr::V4(addr))
                .with_context(|| format!("listening on {addr}"))?;
            let (held, task_bytes) = (held.clone(), task_bytes.clone());
            tokio::task::spawn_local(async move {
                while let Ok((s, _)) = listener.accept().await {
                    let _ = s.set_nodelay(true);
                    task_bytes.set(spawn_counted(s, &held));
                }
            });
        }
        let mut commands = stdin_lines()?;
        println!("listening");
        while let Some(cmd) = commands.recv().await {
            let line = match cmd.trim() {
                "held" => format!("held {}", held.get()),
                "memory" => format!("memory {}", memory(&stack, held.get(), task_bytes.get())),
                "report" => format!(
                    "report {}",
                    json!({ "counters": stack.runtime().stack().mib().to_json(), "link": null })
                ),
                other => anyhow::bail!("unknown command {other:?} (held, memory, report)"),
            };
            println!("{line}");
        }
        Ok(())
    })
}

/// The server's accounting: the runtime's kinds (the stack's among them) and `tasks`, the
/// echo tasks' futures (`held` of `task_bytes` each; tokio's task header and the waker
/// table of the `LocalStack` are not counted: RSS has them).
fn memory(stack: &LocalStack, held: usize, task_bytes: usize) -> Value {
    let mut m = stack.runtime().memory();
    m.kinds.push(MemoryKind {
        name: "tasks",
        count: held,
        bytes: held * task_bytes,
    });
    super::c1m_server::memory_json(&m)
}

/// c1m's Linux server on tokio: a listener on 127.0.0.1:`port` (0: an ephemeral one) in a
/// `SO_REUSEPORT` group, a task per connection, until stdin closes. Says `ready PORT`.
pub fn serve_linux(port: u16) -> anyhow::Result<()> {
    on_local(|| async move {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.set_reuseport(true)?;
        sock.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
        // As deep as the kernel allows (somaxconn), as the baseline server listens.
        let listener = sock.listen(65_535)?;
        let bound = listener.local_addr()?.port();
        let accepted = Rc::new(Cell::new(0u64));
        let held = Rc::new(Cell::new(0usize));
        {
            let accepted = accepted.clone();
            tokio::task::spawn_local(async move {
                while let Ok((s, _)) = listener.accept().await {
                    accepted.set(accepted.get() + 1);
                    let _ = s.set_nodelay(true);
                    spawn_counted(s, &held);
                }
            });
        }
        let mut commands = stdin_lines()?;
        println!("ready {bound}");
        while let Some(cmd) = commands.recv().await {
            match cmd.trim() {
                "stats" => println!("accepted {}", accepted.get()),
                other => anyhow::bail!("unknown command {other:?} (stats)"),
            }
        }
        Ok(())
    })
}
