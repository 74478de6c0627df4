//! SO_REUSEPORT workers: each has its own listening socket, all accept connections, and every
//! socket listens with the configured backlog (somaxconn by default).

mod common;

use std::io::{Read, Write};
use std::process::Command;

use common::{connect, start, wait_stats};
use ustack_baseline::{Proto, Server, ServerConfig};

/// Without the tool the check is skipped with a note, except where `USTACK_REQUIRE_TOOLS`
/// is set (`.ci/run` sets it after installing iproute2 and curl): there it is a failure.
fn missing_tool(tool: &str) {
    assert!(
        std::env::var_os("USTACK_REQUIRE_TOOLS").is_none(),
        "`{tool}` is required (USTACK_REQUIRE_TOOLS) but not available"
    );
    println!("note: `{tool}` is not available; listening sockets not inspected");
}

/// The listening sockets on `port` as `ss -ltn` lists them: their Send-Q column, which for a
/// listener is its backlog. None if `ss` cannot run.
fn listeners(port: u16) -> Option<Vec<u32>> {
    let out = Command::new("timeout")
        .args(["10", "ss", "-Hltn", &format!("sport = :{port}")])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(
        text.lines()
            .map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(cols[0], "LISTEN", "{l}");
                cols[2].parse().expect("Send-Q")
            })
            .collect(),
    )
}

#[test]
fn every_worker_accepts_connections() {
    const WORKERS: usize = 4;
    const CONNS: usize = 200;
    let server = start(Proto::Echo, WORKERS, None);
    assert_eq!(server.workers(), WORKERS);
    // Held open together, so the kernel spreads them over the reuseport group by 4-tuple hash.
    let mut conns: Vec<_> = (0..CONNS).map(|_| connect(server.local_addr())).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let msg = format!("hello {i}");
        c.write_all(msg.as_bytes()).unwrap();
        let mut back = vec![0; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg.as_bytes());
    }
    wait_stats(&server, "all connections accepted", |s| {
        s.connections_accepted == CONNS as u64
    });
    let per_worker = server.worker_stats();
    assert_eq!(per_worker.len(), WORKERS);
    for (i, w) in per_worker.iter().enumerate() {
        // Each worker's share is Binomial(200, 1/4): zero has probability 0.75^200 ≈ 1e-25.
        assert!(
            w.connections_accepted > 0,
            "worker {i} accepted nothing: {per_worker:?}"
        );
    }
    match listeners(server.local_addr().port()) {
        Some(backlogs) => {
            assert_eq!(backlogs.len(), WORKERS, "one listening socket per worker");
            let somaxconn = ustack_baseline::somaxconn();
            assert_eq!(server.backlog(), somaxconn);
            assert!(
                backlogs.iter().all(|&b| b == somaxconn),
                "{backlogs:?} != {somaxconn}"
            );
        }
        None => missing_tool("ss"),
    }
    drop(conns);
    server.stop().unwrap();
}

#[test]
fn an_explicit_backlog_is_used() {
    let server = Server::start(ServerConfig {
        workers: 2,
        backlog: Some(17),
        ..ServerConfig::new(Proto::Http, "127.0.0.1:0".parse().unwrap())
    })
    .unwrap();
    assert_eq!(server.backlog(), 17);
    match listeners(server.local_addr().port()) {
        Some(backlogs) => assert_eq!(backlogs, vec![17, 17]),
        None => missing_tool("ss"),
    }
    server.stop().unwrap();
}

#[test]
fn a_second_server_cannot_take_a_busy_port_without_reuseport() {
    // The workers' sockets really hold the port: a plain listener cannot bind it.
    let server = start(Proto::Discard, 2, None);
    let err = std::net::TcpListener::bind(server.local_addr()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    server.stop().unwrap();
}

#[test]
fn bad_configurations_are_refused() {
    let mut config = ServerConfig::new(Proto::Echo, "127.0.0.1:0".parse().unwrap());
    config.workers = 0;
    assert_eq!(
        Server::start(config.clone()).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
    config.workers = 1;
    config.root_dir = Some("/proc/self/status".into());
    assert_eq!(
        Server::start(config).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
    assert_eq!("udp-echo".parse::<Proto>(), Ok(Proto::UdpEcho));
    assert!("gopher".parse::<Proto>().is_err());
}
