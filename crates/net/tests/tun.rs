//! ustack-net over a TUN interface, the Linux kernel as the peer, in a namespace of the
//! test's own (`ustack_testkit::netns::TunRig`): a std-shaped echo server (a thread per
//! connection) on ustack serves four concurrent kernel clients (Python sockets in the
//! namespace, every byte compared there), and a ustack client's connect to a kernel port
//! nobody listens on is refused, as std's would be.
//!
//! Without root or `/dev/net/tun` each test skips with a note, unless `USTACK_REQUIRE_ROOT`
//! is set (CI), which makes that a failure.

use core::time::Duration;
use std::io::{ErrorKind, Read, Write};

use ustack_net::{Net, TcpListener, TcpStream};
use ustack_runtime::RuntimeBuilder;
use ustack_testkit::netns::{KERNEL_IP, TunRig, USTACK_IP, python_argv, root_or_skip};

const LIMIT: Duration = Duration::from_secs(60);
const CLIENTS: usize = 4;

/// Four kernel clients at once, each sending 256 KiB of its own bytes while reading the
/// echo, and comparing; prints "ok N" with the bytes checked.
const CLIENTS_PY: &str = r#"
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
results = [None] * n
def one(i):
    try:
        s = socket.create_connection((host, port), timeout=30)
        data = random.Random(i).randbytes(256 * 1024)
        t = threading.Thread(target=s.sendall, args=(data,))
        t.start()
        got = bytearray()
        while len(got) < len(data):
            b = s.recv(65536)
            if not b:
                break
            got += b
        t.join()
        s.close()
        results[i] = len(got) if bytes(got) == data else "differs"
    except Exception as e:
        results[i] = repr(e)
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
bad = [r for r in results if not isinstance(r, int)]
if bad:
    print("failed", results)
    sys.exit(1)
print("ok", sum(results))
"#;

fn net_over_tun(rig: &mut TunRig) -> Net {
    let queues = core::mem::take(&mut rig.queues);
    Net::tun(RuntimeBuilder::new().ipv4(USTACK_IP, 24).seed(7), queues).expect("Net over TUN")
}

#[test]
fn kernel_clients_against_a_std_shaped_echo_server_over_tun() {
    let Some(()) = root_or_skip("kernel_clients_against_a_std_shaped_echo_server_over_tun") else {
        return;
    };
    let mut rig = TunRig::new(1, None).expect("TUN rig");
    let net = net_over_tun(&mut rig);
    let listener = TcpListener::bind(&net, (USTACK_IP, 7)).unwrap();
    let server = std::thread::spawn(move || {
        let workers: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let (mut s, _) = listener.accept().expect("accept");
                s.set_read_timeout(Some(LIMIT)).unwrap();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    let mut total = 0;
                    loop {
                        match s.read(&mut buf).expect("read") {
                            0 => return total,
                            n => {
                                s.write_all(&buf[..n]).expect("write");
                                total += n;
                            }
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .sum::<usize>()
    });
    let argv = python_argv(
        CLIENTS_PY,
        &[USTACK_IP.to_string(), "7".into(), CLIENTS.to_string()],
    );
    let out = rig.ns.run(LIMIT, &argv).expect("kernel clients");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        format!("ok {}", CLIENTS * 256 * 1024),
        "{said}"
    );
    assert_eq!(server.join().unwrap(), CLIENTS * 256 * 1024);
}

#[test]
fn connect_to_a_closed_kernel_port_is_refused_over_tun() {
    let Some(()) = root_or_skip("connect_to_a_closed_kernel_port_is_refused_over_tun") else {
        return;
    };
    let mut rig = TunRig::new(1, None).expect("TUN rig");
    let net = net_over_tun(&mut rig);
    let e = TcpStream::connect(&net, (KERNEL_IP, 9)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
}
