//! An echo server and its clients written as with `std::net` (a thread per connection,
//! blocking reads and writes), on ustack through `ustack-net`. Copy it: the only
//! differences from a std program are the [`Net`] made first and passed to `bind` and
//! `connect`.
//!
//! ```text
//! cargo run --release -p ustack-net --example std_echo                     # sim, 8 clients
//! cargo run --release -p ustack-net --example std_echo -- --link shm --clients 16
//! cargo run --release -p ustack-net --example std_echo -- --pingpong 20000 --link sim
//! cargo run --release -p ustack-net --example std_echo -- --pingpong 20000 --link kernel
//! ```
//!
//! Both ends run in this process, each on its own ustack (`--link sim`: the two ends of
//! an in-process sim link, one loop thread; `--link shm`: a shm link, a loop thread per
//! side; `--link kernel`: the same code on `std::net` over the kernel's loopback, for
//! comparison). `--clients N` threads each keep one connection and send `--messages`
//! 64-byte messages, one at a time, checking every echoed byte; `--pingpong N` is one
//! connection doing N round trips of 64 bytes, and prints messages (round trips) per
//! second: the cost per message of this API (docs/api.md has the figures).

use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::SimLinkConfig;
use ustack_net::{Net, TcpListener, TcpStream};
use ustack_runtime::RuntimeBuilder;

const SERVER: &str = "10.0.0.1:7";

/// Echo everything a connection sends, until it closes: the same code for a std stream
/// and a ustack one.
fn echo<S: Read + Write>(mut s: S) -> io::Result<u64> {
    let mut buf = [0u8; 4096];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        s.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// `messages` round trips of 64 bytes, each echo checked.
fn client<S: Read + Write>(mut s: S, id: u64, messages: u64) -> io::Result<()> {
    let mut msg = [0u8; 64];
    let mut back = [0u8; 64];
    for seq in 0..messages {
        msg[..8].copy_from_slice(&id.to_le_bytes());
        msg[8..16].copy_from_slice(&seq.to_le_bytes());
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
        if back != msg {
            return Err(io::Error::new(ErrorKind::InvalidData, "echo differs"));
        }
    }
    Ok(())
}

/// The two stacks: (server, client).
fn nets(link: &str) -> io::Result<(Net, Net)> {
    let server = RuntimeBuilder::new().ipv4("10.0.0.1".parse().unwrap(), 24);
    let client = RuntimeBuilder::new().ipv4("10.0.0.2".parse().unwrap(), 24);
    match link {
        "sim" => Net::sim_pair(server, client, SimLinkConfig::default()),
        "shm" => {
            let (a, b) = ShmLink::pair(&ShmConfig::default())?;
            Ok((Net::shm(server, a)?, Net::shm(client, b)?))
        }
        other => Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!("--link {other}: sim, shm or kernel"),
        )),
    }
}

fn run_ustack(link: &str, clients: u64, messages: u64) -> io::Result<f64> {
    let (snet, cnet) = nets(link)?;
    let listener = TcpListener::bind(&snet, SERVER)?;
    let server = std::thread::spawn(move || -> io::Result<()> {
        let mut workers = Vec::new();
        for _ in 0..clients {
            let (s, _peer) = listener.accept()?;
            s.set_nodelay(true)?;
            workers.push(std::thread::spawn(move || echo(s)));
        }
        for w in workers {
            w.join().expect("echo thread")?;
        }
        Ok(())
    });
    let t0 = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|id| {
            let cnet = cnet.clone();
            std::thread::spawn(move || -> io::Result<()> {
                let s = TcpStream::connect(&cnet, SERVER)?;
                s.set_nodelay(true)?;
                client(s, id, messages)
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread")?;
    }
    let secs = t0.elapsed().as_secs_f64();
    server.join().expect("server thread")?;
    Ok(secs)
}

fn run_kernel(clients: u64, messages: u64) -> io::Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr: SocketAddr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> io::Result<()> {
        let mut workers = Vec::new();
        for _ in 0..clients {
            let (s, _peer) = listener.accept()?;
            s.set_nodelay(true)?;
            workers.push(std::thread::spawn(move || echo(s)));
        }
        for w in workers {
            w.join().expect("echo thread")?;
        }
        Ok(())
    });
    let t0 = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|id| {
            std::thread::spawn(move || -> io::Result<()> {
                let s = std::net::TcpStream::connect(addr)?;
                s.set_nodelay(true)?;
                client(s, id, messages)
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread")?;
    }
    let secs = t0.elapsed().as_secs_f64();
    server.join().expect("server thread")?;
    Ok(secs)
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let num = |name: &str, default: u64| -> io::Result<u64> {
        value(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| io::Error::new(ErrorKind::InvalidInput, format!("{name} takes a number")))
        })
    };
    let link = value("--link").unwrap_or("sim");
    let (clients, messages) = match value("--pingpong") {
        Some(_) => (1, num("--pingpong", 20_000)?),
        None => (num("--clients", 8)?, num("--messages", 2_000)?),
    };
    let secs = if link == "kernel" {
        run_kernel(clients, messages)?
    } else {
        run_ustack(link, clients, messages)?
    };
    let total = clients * messages;
    println!(
        "link {link}: {clients} connection(s) x {messages} round trips of 64 bytes, every byte checked: \
         {total} in {secs:.3} s = {:.0} messages/s ({:.1} us per round trip per connection)",
        total as f64 / secs,
        secs * 1e6 / messages as f64
    );
    Ok(())
}
