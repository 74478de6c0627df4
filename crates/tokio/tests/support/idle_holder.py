# Opens N TCP connections to HOST:PORT and holds them idle (a keep-alive client's pool).
# Arguments: HOST PORT N GET. With GET=1 each connection first sends one HTTP/1.1
# "GET /" and reads the whole answer (status 200, body "Hello, World!"), so that the
# server's connection task has served a request and waits for the next one.
# Raises RLIMIT_NOFILE to its hard limit, at most 256 connects in flight, prints
# "held H ok K failed F" once done, then holds until stdin closes (or 120 s), and exits
# (closing every connection). Used by crates/tokio/tests/tun.rs and
# crates/tokio/scripts/axum_idle.sh.
import errno, resource, select, socket, sys, time

host, port, n, get = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < n + 64:
    sys.exit(f"RLIMIT_NOFILE's hard limit {hard} is below {n + 64}")
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
REQ = f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
WANT = b"Hello, World!"
ep = select.epoll()
# fd -> [socket, state, received bytes]; state: "connect", "answer", "held"
conns, held, ok, failed, opened, busy = {}, 0, 0, 0, 0, 0
t0 = time.monotonic()
while held + failed < n and time.monotonic() < t0 + 60:
    while opened < n and busy < 256:
        opened += 1
        s = socket.socket()
        s.setblocking(False)
        if s.connect_ex((host, port)) not in (0, errno.EINPROGRESS):
            failed += 1
            s.close()
            continue
        conns[s.fileno()] = [s, "connect", b""]
        ep.register(s.fileno(), select.EPOLLOUT)
        busy += 1
    for fd, ev in ep.poll(1.0):
        c = conns[fd]
        s = c[0]
        if c[1] == "connect":
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                failed += 1; busy -= 1; ep.unregister(fd); continue
            if not get:
                c[1] = "held"; held += 1; busy -= 1; ep.unregister(fd); continue
            s.send(REQ)
            c[1] = "answer"
            ep.modify(fd, select.EPOLLIN)
        elif c[1] == "answer":
            try:
                d = s.recv(4096)
            except OSError:
                d = b""
            if not d:
                failed += 1; busy -= 1; ep.unregister(fd); continue
            c[2] += d
            if c[2].endswith(WANT):
                if c[2].startswith(b"HTTP/1.1 200"):
                    ok += 1
                c[1] = "held"; held += 1; busy -= 1; ep.unregister(fd)
print(f"held {held} ok {ok} failed {failed}", flush=True)
sel = select.poll()
sel.register(sys.stdin, select.POLLIN | select.POLLHUP)
sel.poll(120_000)
