//! Model (b) sharded (`LocalStack::spawn_shards`): two shards, each a current-thread
//! runtime on a thread of its own with a `LocalStack` over its own queue pair of one shm
//! link and a listener of its own on the same address (as `SO_REUSEPORT` gives each
//! thread of a server); a two-shard `Net` client over the other side of the link opens
//! connections, which it spreads over the queue pairs, and checks every byte echoed.
//! Both shards accept and echo.

use core::time::Duration;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::local::{LocalStack, LocalTcpListener};
use ustack_tokio::{Net, TcpStream};

/// The bound on the test (tokio's clock for the client, the wall clock for the join).
const LIMIT: Duration = Duration::from_secs(60);
const SHARDS: usize = 2;
const CONNS: usize = 6;
const BYTES: usize = 200 * 1024;

#[test]
fn two_local_shards_each_accept_and_echo() {
    let config = ShmConfig {
        queue_pairs: SHARDS,
        ..ShmConfig::default()
    };
    let (a, b) = ShmLink::pair(&config).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = RuntimeBuilder::new()
        .ipv4("10.0.0.1".parse().unwrap(), 24)
        .seed(3);
    // Each shard: its own listener on 10.0.0.1:7, an echo task per connection, until told
    // to stop; it returns how many connections it accepted and echoed to their end.
    let shards = LocalStack::spawn_shards(server, a, move |stack, _k| {
        let mut stop = stop_rx.clone();
        async move {
            let listener = LocalTcpListener::bind(&stack, "10.0.0.1:7".parse().unwrap())
                .expect("a listener per shard on the same address");
            let mut echoes = Vec::new();
            loop {
                tokio::select! {
                    r = listener.accept() => {
                        let (mut s, _) = r.expect("accept");
                        echoes.push(tokio::task::spawn_local(async move {
                            let mut buf = vec![0u8; 16 * 1024];
                            loop {
                                match s.read(&mut buf).await.expect("read") {
                                    0 => break,
                                    n => s.write_all(&buf[..n]).await.expect("write"),
                                }
                            }
                        }));
                    }
                    _ = stop.changed() => break,
                }
            }
            let n = echoes.len();
            for e in echoes {
                e.await.expect("an echo task");
            }
            n
        }
    })
    .unwrap();

    let client = RuntimeBuilder::new()
        .ipv4("10.0.0.2".parse().unwrap(), 24)
        .seed(4);
    let net = Net::shm(client, b).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(LIMIT, async {
            let mut tasks = Vec::new();
            for i in 0..CONNS {
                let net = net.clone();
                tasks.push(tokio::spawn(async move {
                    // The shards bind on their own threads: retry while refused.
                    let s = loop {
                        match TcpStream::connect(&net, "10.0.0.1:7").await {
                            Ok(s) => break s,
                            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(e) => panic!("connect: {e}"),
                        }
                    };
                    let data = ustack_testkit::pattern(BYTES, i as u64);
                    let (mut r, mut w) = s.into_split();
                    let send = data.clone();
                    let writer = tokio::spawn(async move {
                        w.write_all(&send).await.expect("write");
                        w.shutdown().await.expect("shutdown");
                    });
                    let mut got = Vec::new();
                    r.read_to_end(&mut got).await.expect("read");
                    writer.await.unwrap();
                    assert!(
                        got == data,
                        "connection {i}: {} bytes, not the ones sent",
                        got.len()
                    );
                }));
            }
            for t in tasks {
                t.await.expect("a client connection");
            }
        })
        .await
        .expect("the echoes in time");
    });
    stop_tx.send(true).unwrap();
    let end = Instant::now() + LIMIT;
    let mut accepted = Vec::new();
    for (k, shard) in shards.into_iter().enumerate() {
        while !shard.is_finished() {
            assert!(Instant::now() < end, "shard {k} did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        accepted.push(shard.join().expect("shard thread").expect("shard's stack"));
    }
    eprintln!("connections accepted per shard: {accepted:?}");
    assert_eq!(accepted.iter().sum::<usize>(), CONNS, "{accepted:?}");
    assert!(
        accepted.iter().all(|&n| n > 0),
        "every shard accepted and echoed: {accepted:?}"
    );
}
