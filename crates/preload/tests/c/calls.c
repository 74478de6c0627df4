/* The interposed calls, from an ordinary C program run under LD_PRELOAD=libustack_preload.so
 * (tests/preload.rs sets USTACK_* for a TUN in a namespace: ustack is 192.0.2.2, the
 * kernel 192.0.2.1 with a TCP echo on port 7, and a kernel client that connects to port
 * 8000 once this program listens). The program uses only libc's names: socket, connect,
 * read, epoll_wait ... Each check exits non-zero with the line on failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c)                                                                              \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n", __FILE__, __LINE__,  \
                    #c, errno, strerror(errno));                                              \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* The call fails with exactly this errno. */
#define FAILS(call, e)                                                                        \
    do {                                                                                      \
        errno = 0;                                                                            \
        CHECK((call) == -1);                                                                  \
        CHECK(errno == (e));                                                                  \
    } while (0)

#define SA(x) ((struct sockaddr *)&(x))

static struct sockaddr_in sin4(const char *ip, int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
    return a;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* CPU time of the whole process (ustack's loop threads included), in ms. */
static double cpu_ms(void) {
    struct rusage r;
    CHECK(getrusage(RUSAGE_SELF, &r) == 0);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e3 +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e3;
}

static int ustack_conn(void);

/* Read exactly n bytes (blocking socket). */
static void read_all(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
}

/* Errors: the same errno on a ustack socket as on a kernel one (an AF_INET6 socket, which
 * the preload leaves to the kernel). */
static void errors_side_by_side(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int k = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(s > 2 && k > 2 && s != k);
    char b[4];
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    FAILS(read(s, b, 1), ENOTCONN);
    FAILS(read(k, b, 1), ENOTCONN);
    FAILS(recv(s, b, 1, 0), ENOTCONN);
    FAILS(recv(k, b, 1, 0), ENOTCONN);
    FAILS(getpeername(s, SA(a), &len), ENOTCONN);
    FAILS(getpeername(k, SA(a), &len), ENOTCONN);
    FAILS(send(s, "x", 1, MSG_NOSIGNAL), EPIPE);
    FAILS(send(k, "x", 1, MSG_NOSIGNAL), EPIPE);
    FAILS(shutdown(s, SHUT_RDWR), ENOTCONN);
    FAILS(shutdown(k, SHUT_RDWR), ENOTCONN);
    struct sockaddr_in foreign = sin4("198.51.100.7", 80);
    FAILS(bind(s, SA(foreign), sizeof foreign), EADDRNOTAVAIL);
    FAILS(getsockopt(s, SOL_SOCKET, 0x7fff, b, &len), ENOPROTOOPT);
    len = sizeof a;
    FAILS(getsockopt(k, SOL_SOCKET, 0x7fff, b, &len), ENOPROTOOPT);
    int v = 0;
    len = sizeof v;
    CHECK(getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &len) == 0 && v == SOCK_STREAM);
    CHECK(getsockopt(s, SOL_SOCKET, SO_DOMAIN, &v, &len) == 0 && v == AF_INET);
    /* fcntl and ioctl: O_NONBLOCK both ways, on both. */
    int sk[2] = {s, k};
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(sk[i], F_GETFL);
        CHECK(fl >= 0 && (fl & O_ACCMODE) == O_RDWR && !(fl & O_NONBLOCK));
        CHECK(fcntl(sk[i], F_SETFL, fl | O_NONBLOCK) == 0);
        CHECK(fcntl(sk[i], F_GETFL) & O_NONBLOCK);
        int off = 0;
        CHECK(ioctl(sk[i], FIONBIO, &off) == 0);
        CHECK(!(fcntl(sk[i], F_GETFL) & O_NONBLOCK));
        CHECK(fcntl(sk[i], F_SETFD, FD_CLOEXEC) == 0);
        CHECK(fcntl(sk[i], F_GETFD) == FD_CLOEXEC);
    }
    /* dup: another descriptor of the same socket, on both. */
    for (int i = 0; i < 2; i++) {
        int d = dup(sk[i]);
        CHECK(d > 2 && d != sk[i]);
        CHECK(getsockopt(d, SOL_SOCKET, SO_TYPE, &v, &len) == 0 && v == SOCK_STREAM);
        CHECK(close(d) == 0);
    }
    CHECK(close(s) == 0);
    CHECK(close(k) == 0);
    FAILS(read(s, b, 1), EBADF);
    FAILS(close(s), EBADF);
    /* Unix sockets are the kernel's, untouched. */
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    CHECK(write(sp[0], "unix", 4) == 4);
    CHECK(read(sp[1], b, 4) == 4 && memcmp(b, "unix", 4) == 0);
    CHECK(close(sp[0]) == 0 && close(sp[1]) == 0);
}

/* A client of the kernel's echo: every data call, names and options. */
static int client(void) {
    struct sockaddr_in to = sin4("192.0.2.1", 7);
    int c = ustack_conn();
    struct sockaddr_in me, peer;
    socklen_t len = sizeof me;
    CHECK(getsockname(c, SA(me), &len) == 0 && len == sizeof me);
    CHECK(me.sin_addr.s_addr == sin4("192.0.2.2", 0).sin_addr.s_addr && me.sin_port != 0);
    len = sizeof peer;
    CHECK(getpeername(c, SA(peer), &len) == 0);
    CHECK(peer.sin_addr.s_addr == to.sin_addr.s_addr && peer.sin_port == htons(7));
    int one = 1, v = 0;
    CHECK(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
    len = sizeof v;
    CHECK(getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v == 1);

    char buf[64];
    CHECK(write(c, "write;", 6) == 6);
    read_all(c, buf, 6);
    CHECK(memcmp(buf, "write;", 6) == 0);
    CHECK(send(c, "send;", 5, 0) == 5);
    CHECK(recv(c, buf, 5, MSG_WAITALL) == 5 && memcmp(buf, "send;", 5) == 0);
    CHECK(sendto(c, "sendto;", 7, 0, NULL, 0) == 7);
    CHECK(recvfrom(c, buf, 7, MSG_WAITALL, NULL, NULL) == 7 && memcmp(buf, "sendto;", 7) == 0);
    struct iovec out[2] = {{"writ", 4}, {"ev;", 3}};
    CHECK(writev(c, out, 2) == 7);
    char a[3], b[4];
    struct iovec in[2] = {{a, 3}, {b, 4}};
    /* Wait for all 7 bytes (FIONREAD), then one readv takes them. */
    int ready = 0;
    for (int i = 0; i < 500 && ready < 7; i++) {
        CHECK(ioctl(c, FIONREAD, &ready) == 0);
        if (ready < 7) usleep(10000);
    }
    CHECK(ready == 7);
    CHECK(readv(c, in, 2) == 7);
    CHECK(memcmp(a, "wri", 3) == 0 && memcmp(b, "tev;", 4) == 0);
    struct msghdr m;
    memset(&m, 0, sizeof m);
    struct iovec mv = {"sendmsg;", 8};
    m.msg_iov = &mv;
    m.msg_iovlen = 1;
    CHECK(sendmsg(c, &m, 0) == 8);
    struct iovec rv = {buf, 8};
    m.msg_iov = &rv;
    CHECK(recvmsg(c, &m, MSG_WAITALL) == 8 && memcmp(buf, "sendmsg;", 8) == 0);
    /* A blocking writev or sendmsg larger than the send buffer (16 KiB) takes every
     * byte before it returns, as Linux's does. */
    static char big[96 * 1024], back[96 * 1024];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 7 + i / 251);
    struct iovec bv[2] = {{big, 40000}, {big + 40000, sizeof big - 40000}};
    CHECK(writev(c, bv, 2) == (ssize_t)sizeof big);
    read_all(c, back, sizeof big);
    CHECK(memcmp(big, back, sizeof big) == 0);
    memset(&m, 0, sizeof m);
    m.msg_iov = bv;
    m.msg_iovlen = 2;
    CHECK(sendmsg(c, &m, 0) == (ssize_t)sizeof big);
    read_all(c, back, sizeof big);
    CHECK(memcmp(big, back, sizeof big) == 0);
    /* Non-blocking: nothing to read is EAGAIN. */
    CHECK(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK) == 0);
    FAILS(read(c, buf, sizeof buf), EAGAIN);
    CHECK(fcntl(c, F_SETFL, fcntl(c, F_GETFL) & ~O_NONBLOCK) == 0);
    return c;
}

/* One epoll set holding a pipe and a ustack socket: an idle wait sleeps (no CPU), each
 * side's event comes back with its own data. */
static void epoll_mixed(int c) {
    int p[2];
    CHECK(pipe(p) == 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep > 2);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1111};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0);
    ev.data.u64 = 2222;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
    FAILS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev), EEXIST);
    struct epoll_event out[8];

    double t0 = now_ms(), c0 = cpu_ms();
    CHECK(epoll_wait(ep, out, 8, 300) == 0);
    double waited = now_ms() - t0, cpu = cpu_ms() - c0;
    CHECK(waited >= 290);
    if (cpu > 60) {
        fprintf(stderr, "an idle epoll_wait of %.0f ms used %.0f ms of CPU\n", waited, cpu);
        CHECK(cpu <= 60);
    }

    CHECK(write(p[1], "k", 1) == 1);
    int n = epoll_wait(ep, out, 8, 5000);
    CHECK(n == 1 && out[0].data.u64 == 1111 && (out[0].events & EPOLLIN));
    char b[16];
    CHECK(read(p[0], b, 1) == 1);

    CHECK(write(c, "epoll;", 6) == 6);
    n = epoll_wait(ep, out, 8, 5000);
    CHECK(n == 1 && out[0].data.u64 == 2222 && (out[0].events & EPOLLIN));
    read_all(c, b, 6);
    CHECK(memcmp(b, "epoll;", 6) == 0);

    /* Both at once: both reported by one wait (once the echo is back). */
    CHECK(write(c, "both;", 5) == 5);
    int ready = 0;
    for (int i = 0; i < 500 && ready < 5; i++) {
        CHECK(ioctl(c, FIONREAD, &ready) == 0);
        if (ready < 5) usleep(10000);
    }
    CHECK(ready == 5);
    CHECK(write(p[1], "k", 1) == 1);
    n = epoll_wait(ep, out, 8, 5000);
    CHECK(n == 2);
    CHECK(out[0].data.u64 + out[1].data.u64 == 3333 && (out[0].events & out[1].events & EPOLLIN));
    /* One slot: the kernel's file is not starved by a ready ustack socket. */
    CHECK(epoll_wait(ep, out, 1, 0) == 1);
    int which = (int)out[0].data.u64;
    CHECK(epoll_wait(ep, out, 1, 0) == 1);
    CHECK((int)out[0].data.u64 + which == 3333);
    read_all(c, b, 5);
    CHECK(read(p[0], b, 1) == 1);

    /* Removed: a socket's data no longer wakes the set. */
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL) == 0);
    FAILS(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL), ENOENT);
    CHECK(write(c, "del;", 4) == 4);
    CHECK(epoll_wait(ep, out, 8, 200) == 0);
    read_all(c, b, 4);
    CHECK(close(ep) == 0);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
}

/* poll and select over a pipe and a ustack socket. */
static void poll_mixed(int c) {
    int p[2];
    CHECK(pipe(p) == 0);
    struct pollfd f[2] = {{.fd = p[0], .events = POLLIN}, {.fd = c, .events = POLLIN}};
    double t0 = now_ms(), c0 = cpu_ms();
    CHECK(poll(f, 2, 300) == 0);
    double cpu = cpu_ms() - c0;
    CHECK(now_ms() - t0 >= 290);
    if (cpu > 60) {
        fprintf(stderr, "an idle poll used %.0f ms of CPU\n", cpu);
        CHECK(cpu <= 60);
    }
    CHECK(write(c, "poll;", 5) == 5);
    CHECK(poll(f, 2, 5000) == 1);
    CHECK(f[0].revents == 0 && (f[1].revents & POLLIN));
    char b[8];
    read_all(c, b, 5);
    CHECK(memcmp(b, "poll;", 5) == 0);
    CHECK(write(p[1], "k", 1) == 1);
    CHECK(poll(f, 2, 5000) == 1);
    CHECK((f[0].revents & POLLIN) && f[1].revents == 0);
    CHECK(read(p[0], b, 1) == 1);

    fd_set r, w;
    FD_ZERO(&r);
    FD_ZERO(&w);
    FD_SET(p[0], &r);
    FD_SET(c, &r);
    FD_SET(c, &w);
    int max = (p[0] > c ? p[0] : c) + 1;
    struct timeval tv = {5, 0};
    /* Writable at once, nothing to read. */
    CHECK(select(max, &r, &w, NULL, &tv) == 1);
    CHECK(FD_ISSET(c, &w) && !FD_ISSET(c, &r) && !FD_ISSET(p[0], &r));
    CHECK(write(c, "select;", 7) == 7);
    FD_ZERO(&r);
    FD_SET(p[0], &r);
    FD_SET(c, &r);
    tv.tv_sec = 5;
    CHECK(select(max, &r, NULL, NULL, &tv) == 1);
    CHECK(FD_ISSET(c, &r) && !FD_ISSET(p[0], &r));
    read_all(c, b, 7);
    CHECK(memcmp(b, "select;", 7) == 0);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
}

/* A server: the kernel's client connects to 192.0.2.2:8000, sends a line, reads "ack:"
 * and the line back. The listener waits in epoll. */
static void server(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l > 2);
    int one = 1;
    CHECK(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in any = sin4("0.0.0.0", 8000);
    CHECK(bind(l, SA(any), sizeof any) == 0);
    CHECK(listen(l, 16) == 0);
    int v = 0;
    socklen_t len = sizeof v;
    CHECK(getsockopt(l, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v == 1);
    CHECK(fcntl(l, F_SETFL, O_NONBLOCK) == 0);
    struct sockaddr_in peer;
    len = sizeof peer;
    FAILS(accept(l, SA(peer), &len), EAGAIN);
    printf("listening on 8000\n");
    fflush(stdout);
    int ep = epoll_create(4);
    CHECK(ep > 2);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) == 0);
    struct epoll_event out[4];
    CHECK(epoll_wait(ep, out, 4, 20000) == 1 && out[0].data.fd == l);
    len = sizeof peer;
    int s = accept4(l, SA(peer), &len, SOCK_CLOEXEC);
    CHECK(s > 2);
    CHECK(peer.sin_addr.s_addr == sin4("192.0.2.1", 0).sin_addr.s_addr);
    char line[128];
    size_t n = 0;
    while (n < sizeof line - 1) {
        ssize_t r = read(s, line + n, 1);
        CHECK(r == 1);
        if (line[n++] == '\n') break;
    }
    CHECK(write(s, "ack:", 4) == 4);
    CHECK(write(s, line, n) == (ssize_t)n);
    CHECK(shutdown(s, SHUT_WR) == 0);
    char b[8];
    CHECK(read(s, b, sizeof b) == 0); /* the client's FIN */
    CHECK(close(s) == 0);
    CHECK(close(ep) == 0);
    CHECK(close(l) == 0);
}

/* fork: the child's stack is its own (a TUN queue of its own). Its calls on the inherited
 * connection fail with EBADFD (connections stay the parent's), a new AF_INET socket is
 * the child stack's, close only releases the number; the parent's connection goes on. */
static void fork_refused(int c) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char b[4];
        errno = 0;
        if (read(c, b, 1) != -1 || errno != EBADFD) _exit(2);
        errno = 0;
        if (write(c, "x", 1) != -1 || errno != EBADFD) _exit(3);
        errno = 0;
        int n = socket(AF_INET, SOCK_STREAM, 0);
        if (n < 0 || close(n) != 0) _exit(4);
        int u = socket(AF_UNIX, SOCK_STREAM, 0); /* the kernel's still work */
        if (u < 0 || close(u) != 0) _exit(5);
        if (close(c) != 0) _exit(6);
        _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "the forked child failed check %d\n", WEXITSTATUS(st));
        CHECK(0);
    }
    char b[8];
    CHECK(write(c, "fork;", 5) == 5);
    read_all(c, b, 5);
    CHECK(memcmp(b, "fork;", 5) == 0);
}

/* ---- The same calls on a ustack socket and on a kernel one, side by side ------------------
 * A ustack connection to the kernel's echo (192.0.2.1:7, over TUN) and a kernel connection
 * to an echo thread of this program's own (IPv6 loopback: the preload leaves AF_INET6 to
 * the kernel). Each BOTH(call) runs `call` with X the ustack socket, then with X the
 * kernel's, and fails unless both return the same value and, on failure, the same errno. */

#define BOTH(call)                                                                            \
    do {                                                                                      \
        int X = u;                                                                            \
        errno = 0;                                                                            \
        long ru_ = (long)(call);                                                              \
        int eu_ = errno;                                                                      \
        X = k;                                                                                \
        errno = 0;                                                                            \
        long rk_ = (long)(call);                                                              \
        int ek_ = errno;                                                                      \
        (void)X;                                                                              \
        if (ru_ != rk_ || (ru_ == -1 && eu_ != ek_)) {                                        \
            fprintf(stderr, "%s:%d: %s: ustack %ld (errno %d %s), kernel %ld (errno %d %s)\n", \
                    __FILE__, __LINE__, #call, ru_, eu_, strerror(eu_), rk_, ek_,            \
                    strerror(ek_));                                                           \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* The kernel's echo: an IPv6 loopback listener, one connection at a time. */
static void *kernel_echo(void *arg) {
    int l = *(int *)arg;
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) return NULL;
        char b[4096];
        ssize_t n;
        while ((n = read(c, b, sizeof b)) > 0) {
            if (write(c, b, (size_t)n) != n) break;
        }
        close(c);
    }
}

static struct sockaddr_in6 kernel_echo_addr;

/* A kernel socket of `type` bound to IPv6 loopback, its address in `a`. */
static int loopback6(int type, struct sockaddr_in6 *a) {
    int s = socket(AF_INET6, type, 0);
    CHECK(s > 2);
    memset(a, 0, sizeof *a);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    CHECK(bind(s, (struct sockaddr *)a, sizeof *a) == 0);
    socklen_t len = sizeof *a;
    CHECK(getsockname(s, (struct sockaddr *)a, &len) == 0);
    return s;
}

static void start_kernel_echo(void) {
    static int l;
    l = loopback6(SOCK_STREAM, &kernel_echo_addr);
    CHECK(listen(l, 8) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, kernel_echo, &l) == 0);
    CHECK(pthread_detach(t) == 0);
}

static int kernel_conn(void) {
    int k = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(k > 2);
    CHECK(connect(k, SA(kernel_echo_addr), sizeof kernel_echo_addr) == 0);
    return k;
}

static int ustack_conn(void) {
    struct sockaddr_in to = sin4("192.0.2.1", 7);
    for (int i = 0; i < 100; i++) { /* the echo may not listen yet */
        int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
        CHECK(u > 2);
        if (connect(u, SA(to), sizeof to) == 0) return u;
        CHECK(errno == ECONNREFUSED);
        CHECK(close(u) == 0);
        usleep(100000);
    }
    CHECK(!"the kernel's echo never listened");
    return -1;
}

/* Wait (up to 5 s) until `n` bytes are readable (FIONREAD): n, or the count seen. */
static long readable(int fd, int n) {
    int ready = 0;
    for (int i = 0; i < 500; i++) {
        if (ioctl(fd, FIONREAD, &ready) != 0) return -1;
        if (ready >= n) break;
        usleep(10000);
    }
    return ready;
}

/* The echo of `s` read back with `how` (0 read, 1 recv MSG_WAITALL, 2 recvfrom, 3 readv,
 * 4 recvmsg): 1 if it is `s`. */
static long echoed(int fd, const char *s, int how) {
    size_t n = strlen(s);
    char b[64] = {0};
    if (readable(fd, (int)n) != (long)n) return -2;
    ssize_t r;
    struct iovec iv[2] = {{b, 1}, {b + 1, n - 1}};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = iv;
    m.msg_iovlen = 2;
    switch (how) {
    case 0: r = read(fd, b, n); break;
    case 1: r = recv(fd, b, n, MSG_WAITALL); break;
    case 2: r = recvfrom(fd, b, n, 0, NULL, NULL); break;
    case 3: r = readv(fd, iv, 2); break;
    default: r = recvmsg(fd, &m, 0); break;
    }
    return r == (ssize_t)n && memcmp(b, s, n) == 0;
}

static long sendv(int fd, const char *s, int msg) {
    size_t n = strlen(s);
    struct iovec iv[2] = {{(void *)s, 2}, {(void *)(s + 2), n - 2}};
    if (!msg) return writev(fd, iv, 2);
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = iv;
    m.msg_iovlen = 2;
    return sendmsg(fd, &m, MSG_NOSIGNAL);
}

static long opt_int(int fd, int level, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    if (getsockopt(fd, level, name, &v, &len) != 0) return -1;
    return len == sizeof v ? v : -3;
}

static long set_int(int fd, int level, int name, int v) {
    return setsockopt(fd, level, name, &v, sizeof v);
}

/* getsockname/getpeername fill an address of the socket's family and its length. */
static long name_ok(int fd, int peer) {
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    int r = peer ? getpeername(fd, SA(a), &len) : getsockname(fd, SA(a), &len);
    if (r != 0) return -1;
    if (a.ss_family == AF_INET) return len == sizeof(struct sockaddr_in) ? 0 : -3;
    if (a.ss_family == AF_INET6) return len == sizeof(struct sockaddr_in6) ? 0 : -3;
    return -4;
}

static long poll1(int fd, short events, int timeout) {
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, timeout);
    return n < 0 ? -1 : n * 0x10000 + p.revents;
}

/* select on one descriptor: its count, and which sets it is in. */
static long select1(int fd, int rd, int wr, int timeout_ms) {
    fd_set r, w;
    FD_ZERO(&r);
    FD_ZERO(&w);
    if (rd) FD_SET(fd, &r);
    if (wr) FD_SET(fd, &w);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    int n = select(fd + 1, rd ? &r : NULL, wr ? &w : NULL, NULL, &tv);
    if (n < 0) return -1;
    return n * 100 + (rd && FD_ISSET(fd, &r)) * 10 + (wr && FD_ISSET(fd, &w));
}

/* A fresh epoll set over fd with `events`: what one wait reports (events, or -1). */
static long epoll1(int fd, unsigned events, int timeout) {
    int ep = epoll_create1(0);
    if (ep < 0) return -10;
    struct epoll_event ev = {.events = events, .data.u64 = 77};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        close(ep);
        errno = e;
        return -1;
    }
    struct epoll_event out[2];
    int n = epoll_wait(ep, out, 2, timeout);
    long r = n < 0 ? -1 : n == 0 ? 0 : (out[0].data.u64 == 77 ? (long)out[0].events : -5);
    close(ep);
    return r;
}

/* Edge and one-shot: a byte echoed is reported once; again only after new data (edge) or
 * a re-arm (one-shot). Each step's result in a number. */
static long epoll_modes(int fd) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 5};
    struct epoll_event out[2];
    long r = 0;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) return -1;
    if (write(fd, "e", 1) != 1) return -2;
    r = r * 10 + epoll_wait(ep, out, 2, 5000);       /* 1 */
    r = r * 10 + epoll_wait(ep, out, 2, 100);        /* 0: no new edge */
    if (write(fd, "f", 1) != 1) return -3;
    if (readable(fd, 2) != 2) return -4;
    r = r * 10 + epoll_wait(ep, out, 2, 5000);       /* 1: new data */
    char b[2];
    if (read(fd, b, 2) != 2) return -5;
    ev.events = EPOLLIN | EPOLLONESHOT;
    if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) != 0) return -6;
    if (write(fd, "g", 1) != 1) return -7;
    r = r * 10 + epoll_wait(ep, out, 2, 5000);       /* 1 */
    r = r * 10 + epoll_wait(ep, out, 2, 100);        /* 0: disarmed */
    if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) != 0) return -8;
    r = r * 10 + epoll_wait(ep, out, 2, 5000);       /* 1: re-armed, still readable */
    if (read(fd, b, 1) != 1) return -9;
    if (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) != 0) return -10;
    errno = 0;
    if (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) != -1 || errno != ENOENT) return -11;
    close(ep);
    return r;
}

/* dup, dup2, dup3 and F_DUPFD: the same socket under each number; closing the original
 * keeps it open; dup2 puts it back under its number. 0 if every step went as on Linux,
 * else the step. */
static long dups(int fd) {
    int d = dup(fd);
    if (d < 0 || d == fd) return 1;
    if (fcntl(d, F_GETFD) != 0) return 2;
    if (write(d, "dup;", 4) != 4 || echoed(fd, "dup;", 0) != 1) return 3;
    /* O_NONBLOCK is the open file's: shared. */
    if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || !(fcntl(d, F_GETFL) & O_NONBLOCK)) return 4;
    if (fcntl(fd, F_SETFL, 0) != 0) return 5;
    if (close(fd) != 0) return 6;
    if (write(d, "kept;", 5) != 5 || echoed(d, "kept;", 1) != 1) return 7;
    if (dup2(d, fd) != fd) return 8;
    if (dup2(fd, fd) != fd) return 9;
    errno = 0;
    if (dup3(fd, fd, 0) != -1 || errno != EINVAL) return 10;
    int h = fcntl(fd, F_DUPFD, 300);
    if (h < 300) return 11;
    int hc = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (hc < 0 || fcntl(hc, F_GETFD) != FD_CLOEXEC) return 12;
    /* dup3 onto a pipe's read end: the pipe closes (its writer gets EPIPE). */
    int p[2];
    if (pipe(p) != 0) return 13;
    if (dup3(d, p[0], O_CLOEXEC) != p[0] || fcntl(p[0], F_GETFD) != FD_CLOEXEC) return 14;
    errno = 0;
    if (write(p[1], "x", 1) != -1 || errno != EPIPE) return 15;
    if (write(p[0], "dup3;", 5) != 5 || echoed(fd, "dup3;", 2) != 1) return 16;
    if (close(p[1]) || close(p[0]) || close(d) || close(h) || close(hc)) return 17;
    if (write(fd, "last;", 5) != 5 || echoed(fd, "last;", 0) != 1) return 18;
    /* dup2 from a descriptor not open fails and leaves the target alone. */
    errno = 0;
    if (dup2(987, fd) != -1 || errno != EBADF) return 19;
    if (write(fd, "kept2;", 6) != 6 || echoed(fd, "kept2;", 0) != 1) return 20;
    return 0;
}

/* sendfile of 100,000 bytes of a file, from an offset and from the file's position, each
 * echoed back whole: 0 if every step went as on Linux, else the step. */
static long sendfiles(int fd) {
    static char data[100000], back[100000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (char)(i * 31 + i / 97);
    char path[] = "/tmp/ustack-sendfile-XXXXXX";
    int f = mkstemp(path);
    if (f < 0) return 1;
    unlink(path);
    if (write(f, data, sizeof data) != (ssize_t)sizeof data) return 2;
    off_t off = 1000;
    if (sendfile(fd, f, &off, 50000) != 50000 || off != 51000) return 3;
    size_t got = 0;
    while (got < 50000) {
        ssize_t r = read(fd, back + got, 50000 - got);
        if (r <= 0) return 4;
        got += (size_t)r;
    }
    if (memcmp(back, data + 1000, 50000) != 0) return 5;
    /* From the file's position (the end after the write): nothing; then from 0, to the
     * end (more asked than there is). */
    if (sendfile(fd, f, NULL, 10) != 0) return 6;
    if (lseek(f, 0, SEEK_SET) != 0) return 7;
    if (sendfile(fd, f, NULL, 200000) != (ssize_t)sizeof data) return 8;
    if (lseek(f, 0, SEEK_CUR) != (off_t)sizeof data) return 9;
    got = 0;
    while (got < sizeof data) {
        ssize_t r = read(fd, back + got, sizeof data - got);
        if (r <= 0) return 10;
        got += (size_t)r;
    }
    if (memcmp(back, data, sizeof data) != 0) return 11;
    close(f);
    return 0;
}

/* One epoll set with every kind of file: a pipe, an eventfd, a timerfd, a Unix socket, a
 * kernel TCP connection and a ustack one (a regular file is refused, EPERM, as by the
 * kernel). Each wakes the set alone with its own token; all at once, one wait has all
 * six; a small wait takes turns until each was seen; drained, the set is idle and sleeps. */
static void epoll_everything(int u, int k) {
    int p[2], sp[2];
    CHECK(pipe(p) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    int efd = eventfd(0, EFD_NONBLOCK);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    CHECK(efd > 2 && tfd > 2);
    int ep = epoll_create1(0);
    CHECK(ep > 2);
    int fds[6] = {p[0], efd, tfd, sp[0], k, u};
    for (int i = 0; i < 6; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)(1 << i)};
        CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) == 0);
    }
    int file = open("/proc/self/exe", O_RDONLY);
    CHECK(file > 2);
    struct epoll_event fev = {.events = EPOLLIN};
    FAILS(epoll_ctl(ep, EPOLL_CTL_ADD, file, &fev), EPERM);
    CHECK(close(file) == 0);
    struct epoll_event out[8];
    double c0 = cpu_ms();
    CHECK(epoll_wait(ep, out, 8, 200) == 0);
    if (cpu_ms() - c0 > 40) {
        fprintf(stderr, "an idle 200 ms wait over six kinds used %.0f ms of CPU\n", cpu_ms() - c0);
        CHECK(0);
    }
    uint64_t one = 1;
    struct itimerspec soon = {.it_value = {0, 1000000}};
    char b[16];
    /* Wake one at a time. */
    for (int i = 0; i < 6; i++) {
        switch (i) {
        case 0: CHECK(write(p[1], "p", 1) == 1); break;
        case 1: CHECK(write(efd, &one, 8) == 8); break;
        case 2: CHECK(timerfd_settime(tfd, 0, &soon, NULL) == 0); break;
        case 3: CHECK(write(sp[1], "s", 1) == 1); break;
        case 4: CHECK(write(k, "k", 1) == 1); break;
        case 5: CHECK(write(u, "u", 1) == 1); break;
        }
        int n = epoll_wait(ep, out, 8, 5000);
        CHECK(n == 1 && out[0].data.u64 == (uint64_t)(1 << i) && (out[0].events & EPOLLIN));
        CHECK(read(fds[i], b, i == 1 || i == 2 ? 8 : 1) >= 1);
        CHECK(epoll_wait(ep, out, 8, 0) == 0);
    }
    /* All at once. */
    CHECK(write(p[1], "p", 1) == 1 && write(efd, &one, 8) == 8);
    CHECK(timerfd_settime(tfd, 0, &soon, NULL) == 0);
    CHECK(write(sp[1], "s", 1) == 1 && write(k, "k", 1) == 1 && write(u, "u", 1) == 1);
    CHECK(readable(k, 1) == 1 && readable(u, 1) == 1);
    usleep(5000); /* the timer */
    int n = epoll_wait(ep, out, 8, 5000);
    uint64_t seen = 0;
    for (int i = 0; i < n; i++) seen |= out[i].data.u64;
    CHECK(n == 6 && seen == 63);
    /* Two slots a wait: every one comes up within a few waits. */
    seen = 0;
    for (int w = 0; w < 6 && seen != 63; w++) {
        n = epoll_wait(ep, out, 2, 1000);
        CHECK(n >= 1 && n <= 2);
        for (int i = 0; i < n; i++) seen |= out[i].data.u64;
    }
    CHECK(seen == 63);
    for (int i = 0; i < 6; i++) CHECK(read(fds[i], b, i == 1 || i == 2 ? 8 : 1) >= 1);
    CHECK(epoll_wait(ep, out, 8, 100) == 0);
    CHECK(close(ep) == 0);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0 && close(sp[0]) == 0 && close(sp[1]) == 0);
    CHECK(close(efd) == 0 && close(tfd) == 0);
}

/* Listeners side by side: a ustack one on 0.0.0.0:8001, a kernel one on [::1]. */
static void listeners_side_by_side(void) {
    int u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int k = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(u > 2 && k > 2);
    BOTH(set_int(X, SOL_SOCKET, SO_REUSEADDR, 1));
    BOTH(opt_int(X, SOL_SOCKET, SO_REUSEADDR) != 0);
    struct sockaddr_in ua = sin4("0.0.0.0", 8001);
    struct sockaddr_in6 ka;
    memset(&ka, 0, sizeof ka);
    ka.sin6_family = AF_INET6;
    ka.sin6_addr = in6addr_loopback;
    CHECK(bind(u, SA(ua), sizeof ua) == 0);
    CHECK(bind(k, SA(ka), sizeof ka) == 0);
    BOTH(opt_int(X, SOL_SOCKET, SO_ACCEPTCONN));
    BOTH(listen(X, 4));
    BOTH(listen(X, 8)); /* again: a new backlog */
    BOTH(opt_int(X, SOL_SOCKET, SO_ACCEPTCONN));
    BOTH(name_ok(X, 0));
    BOTH(name_ok(X, 1));
    BOTH(accept(X, NULL, NULL));
    BOTH(accept4(X, NULL, NULL, SOCK_CLOEXEC));
    BOTH(accept4(X, NULL, NULL, 0x4000000));
    char b[4];
    BOTH(read(X, b, 1));
    BOTH(recv(X, b, 1, 0));
    BOTH(send(X, "x", 1, MSG_NOSIGNAL));
    int n = 0;
    BOTH(ioctl(X, FIONREAD, &n));
    BOTH(poll1(X, POLLIN, 0));
    BOTH(select1(X, 1, 0, 0));
    BOTH(epoll1(X, EPOLLIN, 0));
    BOTH(fcntl(X, F_GETFL) & (O_NONBLOCK | O_ACCMODE));
    BOTH(close(X));
    BOTH(close(X));
}

static void side_by_side(void) {
    signal(SIGPIPE, SIG_IGN); /* the kernel's pipes raise it; errno says EPIPE */
    start_kernel_echo();
    int u = ustack_conn(), k = kernel_conn();
    char b[16];
    /* Data through each call. */
    BOTH(write(X, "write;", 6));
    BOTH(echoed(X, "write;", 0));
    BOTH(send(X, "send;", 5, 0));
    BOTH(echoed(X, "send;", 1));
    BOTH(sendto(X, "sendto;", 7, 0, NULL, 0));
    BOTH(echoed(X, "sendto;", 2));
    BOTH(sendv(X, "writev;", 0));
    BOTH(echoed(X, "writev;", 3));
    BOTH(sendv(X, "sendmsg;", 1));
    BOTH(echoed(X, "sendmsg;", 4));
    /* Nothing to read. */
    BOTH(recv(X, b, 1, MSG_DONTWAIT));
    BOTH(recvfrom(X, b, 1, MSG_DONTWAIT, NULL, NULL));
    BOTH(readable(X, 0));
    BOTH(fcntl(X, F_GETFL) & (O_NONBLOCK | O_ACCMODE));
    BOTH(fcntl(X, F_SETFL, O_NONBLOCK));
    BOTH(fcntl(X, F_GETFL) & O_NONBLOCK);
    BOTH(read(X, b, 1));
    BOTH(readv(X, &(struct iovec){b, 1}, 1));
    int off = 0;
    BOTH(ioctl(X, FIONBIO, &off));
    BOTH(fcntl(X, F_GETFL) & O_NONBLOCK);
    BOTH(fcntl(X, F_SETFD, FD_CLOEXEC));
    BOTH(fcntl(X, F_GETFD));
    /* Options and names. */
    BOTH(opt_int(X, SOL_SOCKET, SO_TYPE));
    BOTH(opt_int(X, SOL_SOCKET, SO_ERROR));
    BOTH(opt_int(X, SOL_SOCKET, SO_ACCEPTCONN));
    BOTH(opt_int(X, SOL_SOCKET, SO_KEEPALIVE));
    BOTH(set_int(X, SOL_SOCKET, SO_KEEPALIVE, 1));
    BOTH(opt_int(X, SOL_SOCKET, SO_KEEPALIVE));
    BOTH(opt_int(X, IPPROTO_TCP, TCP_NODELAY));
    BOTH(set_int(X, IPPROTO_TCP, TCP_NODELAY, 1));
    BOTH(opt_int(X, IPPROTO_TCP, TCP_NODELAY));
    BOTH(opt_int(X, SOL_SOCKET, 0x7fff));
    BOTH(setsockopt(X, SOL_SOCKET, SO_KEEPALIVE, b, 1));
    BOTH(name_ok(X, 0));
    BOTH(name_ok(X, 1));
    /* Readiness: writable, not readable; then readable. */
    BOTH(poll1(X, POLLIN, 0));
    BOTH(poll1(X, POLLIN | POLLOUT, 0));
    BOTH(select1(X, 1, 1, 0));
    BOTH(select1(X, 1, 0, 100));
    BOTH(epoll1(X, EPOLLIN, 50));
    BOTH(epoll1(X, EPOLLIN | EPOLLOUT, 0));
    BOTH(write(X, "ready;", 6));
    BOTH(readable(X, 6));
    BOTH(poll1(X, POLLIN, 1000));
    BOTH(select1(X, 1, 0, 1000));
    BOTH(epoll1(X, EPOLLIN, 1000));
    BOTH(echoed(X, "ready;", 0));
    BOTH(epoll_modes(X));
    BOTH(dups(X));
    BOTH(sendfiles(X));
    epoll_everything(u, k);
    /* The end: our FIN, the echo's, then writes fail. */
    BOTH(shutdown(X, SHUT_WR));
    BOTH(read(X, b, sizeof b));
    BOTH(poll1(X, POLLIN, 0) & 0x10000);
    BOTH(send(X, "x", 1, MSG_NOSIGNAL));
    BOTH(shutdown(X, 12));
    BOTH(close(X));
    BOTH(close(X));
    BOTH(write(X, "x", 1));
    listeners_side_by_side();
}


/* ---- recvmmsg/sendmmsg, MSG_PEEK, MSG_OOB, epoll of dup'd descriptors, ppoll/pselect's
 * signal mask, select's timeout: side by side as above (tests/preload.rs adds a UDP echo on
 * 192.0.2.1:7; the kernel's UDP peer is an echo thread on IPv6 loopback). */

/* sendmmsg of "mm1;" "mm2;" "mm3;" on a stream, echoed, read back by one recvmmsg with
 * MSG_WAITFORONE into four 4-byte messages: 3 (the fourth finds nothing), each msg_len 4
 * and in order. The result: sent * 100 + received * 10 + (1 if all matched). */
static long mmsg_stream(int fd) {
    struct mmsghdr m[4];
    struct iovec iv[4];
    char in[4][4];
    const char *out[3] = {"mm1;", "mm2;", "mm3;"};
    memset(m, 0, sizeof m);
    for (int i = 0; i < 3; i++) {
        iv[i] = (struct iovec){(void *)out[i], 4};
        m[i].msg_hdr.msg_iov = &iv[i];
        m[i].msg_hdr.msg_iovlen = 1;
    }
    int sent = sendmmsg(fd, m, 3, MSG_NOSIGNAL);
    if (sent != 3 || m[0].msg_len != 4 || m[2].msg_len != 4) return -2;
    if (readable(fd, 12) != 12) return -3;
    memset(m, 0, sizeof m);
    for (int i = 0; i < 4; i++) {
        iv[i] = (struct iovec){in[i], 4};
        m[i].msg_hdr.msg_iov = &iv[i];
        m[i].msg_hdr.msg_iovlen = 1;
    }
    int got = recvmmsg(fd, m, 4, MSG_WAITFORONE, NULL);
    if (got < 0) return -1;
    int ok = got == 3;
    for (int i = 0; i < got && i < 3; i++)
        ok = ok && m[i].msg_len == 4 && memcmp(in[i], out[i], 4) == 0;
    return sent * 100 + got * 10 + ok;
}

/* A non-blocking sendmmsg of three 4 MiB messages fills the send buffer: the message it
 * stops in is taken in part, which counts and ends the call (Linux __sys_sendmmsg). How
 * many whole messages go first depends on the buffers (the kernel's grow, and drain into
 * its echo peer while the call runs: one run took the first message whole and part of the
 * second), so the check is the rule, not a count: n >= 1, every message before the last
 * counted one whole, the last one counted taken in part (or whole if the call ended with
 * the third), and the echo of everything taken read back byte for byte. The result:
 * 10 if n >= 1, + 1 if the rule held and the echo matched. */
static long mmsg_partial(int fd) {
    static char big[3][4 << 20], back[1 << 16];
    struct mmsghdr m[3];
    struct iovec iv[3];
    memset(m, 0, sizeof m);
    for (int i = 0; i < 3; i++) {
        for (size_t j = 0; j < sizeof big[i]; j++) big[i][j] = (char)(j * 13 + j / 257 + i);
        iv[i] = (struct iovec){big[i], sizeof big[i]};
        m[i].msg_hdr.msg_iov = &iv[i];
        m[i].msg_hdr.msg_iovlen = 1;
    }
    if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0) return -2;
    int n = sendmmsg(fd, m, 3, MSG_NOSIGNAL);
    if (fcntl(fd, F_SETFL, 0) != 0) return -3;
    if (n < 1) return n < 0 ? -1 : 0;
    int rule = 1;
    for (int i = 0; i < n - 1; i++) rule = rule && m[i].msg_len == sizeof big[i];
    unsigned last = m[n - 1].msg_len;
    rule = rule && last > 0 && (last < sizeof big[0] || n == 3);
    /* The echo of message i's first msg_len bytes, for each i < n, in order. */
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        while (got < m[i].msg_len) {
            size_t want = m[i].msg_len - got < sizeof back ? m[i].msg_len - got : sizeof back;
            ssize_t r = read(fd, back, want);
            if (r <= 0) return -4;
            rule = rule && memcmp(back, big[i] + got, (size_t)r) == 0;
            got += (size_t)r;
        }
    }
    return 10 + rule;
}

/* recvmmsg's timeout: 12 bytes there, three 4-byte messages asked for. A zero timeout
 * ends the call after the first message (Linux looks at it after each one); a long one is
 * written back with the time left (0.5 to 5 s of 5 s). Then an invalid timespec (EINVAL)
 * and vlen 0. Each step a digit. */
static long mmsg_timeout(int fd) {
    struct mmsghdr m[3];
    struct iovec iv[3];
    char in[3][4];
    memset(m, 0, sizeof m);
    for (int i = 0; i < 3; i++) {
        iv[i] = (struct iovec){in[i], 4};
        m[i].msg_hdr.msg_iov = &iv[i];
        m[i].msg_hdr.msg_iovlen = 1;
    }
    if (write(fd, "t1;t2;t3;t4;", 12) != 12 || readable(fd, 12) != 12) return -2;
    struct timespec zero = {0, 0};
    long r = recvmmsg(fd, m, 3, 0, &zero);
    struct timespec t = {5, 0};
    r = r * 10 + recvmmsg(fd, m, 3, MSG_DONTWAIT, &t); /* 2: the rest */
    r = r * 10 + (t.tv_sec < 5 && (t.tv_sec >= 1 || t.tv_nsec >= 500000000));
    struct timespec bad = {0, -1};
    errno = 0;
    r = r * 10 + (recvmmsg(fd, m, 3, 0, &bad) == -1 && errno == EINVAL);
    r = r * 10 + (recvmmsg(fd, m, 0, 0, NULL) == 0);
    errno = 0;
    r = r * 10 + (recvmmsg(fd, m, 3, MSG_DONTWAIT, NULL) == -1 && errno == EAGAIN);
    return r;
}

/* MSG_PEEK on a stream: the bytes stay for the next read. */
static long peeks(int fd) {
    char b[16];
    if (write(fd, "peek;more", 9) != 9 || readable(fd, 9) != 9) return -2;
    long r = recv(fd, b, 5, MSG_PEEK);
    if (r != 5 || memcmp(b, "peek;", 5) != 0) return -3;
    if (readable(fd, 9) != 9) return -4; /* still all there */
    struct iovec iv = {b, 16};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iv;
    m.msg_iovlen = 1;
    r = r * 100 + recvmsg(fd, &m, MSG_PEEK | MSG_DONTWAIT);
    if (memcmp(b, "peek;more", 9) != 0) return -5;
    r = r * 100 + recv(fd, b, 9, MSG_PEEK | MSG_WAITALL);
    r = r * 100 + read(fd, b, 9);
    if (memcmp(b, "peek;more", 9) != 0) return -6;
    errno = 0;
    r = r * 10 + (recv(fd, b, 4, MSG_PEEK | MSG_DONTWAIT) == -1 && errno == EAGAIN);
    return r;
}

/* MSG_OOB: "urg!" sent urgent: the peer (the kernel, not SO_OOBINLINE) takes "!" out of
 * the stream, so only "urg" is echoed. recv(MSG_OOB) with no urgent byte: EINVAL. */
static long oob(int fd) {
    char b[8];
    errno = 0;
    long r = recv(fd, b, 1, MSG_OOB | MSG_DONTWAIT) == -1 && errno == EINVAL;
    r = r * 10 + send(fd, "urg!", 4, MSG_OOB | MSG_NOSIGNAL);
    if (readable(fd, 3) != 3) return -2;
    usleep(200000); /* the "!" would have come back by now */
    if (readable(fd, 3) != 3) return -3;
    r = r * 10 + read(fd, b, 3);
    return memcmp(b, "urg", 3) == 0 ? r : -4;
}

/* Two descriptors of one socket (dup) in one epoll set: each its own registration (Linux
 * keys on file and number); the same descriptor twice is EEXIST. */
static long epoll_dup(int fd) {
    int ep = epoll_create1(EPOLL_CLOEXEC), d = dup(fd);
    if (ep < 0 || d < 0) return -2;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1}, out[4];
    long r = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0;
    errno = 0;
    r = r * 10 + (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == -1 && errno == EEXIST);
    ev.data.u64 = 2;
    r = r * 10 + (epoll_ctl(ep, EPOLL_CTL_ADD, d, &ev) == 0);
    errno = 0;
    r = r * 10 + (epoll_ctl(ep, EPOLL_CTL_ADD, d, &ev) == -1 && errno == EEXIST);
    if (write(fd, "d", 1) != 1 || readable(fd, 1) != 1) return -3;
    int n = epoll_wait(ep, out, 4, 5000);
    r = r * 10 + n;
    r = r * 10 + (n == 2 && out[0].data.u64 + out[1].data.u64 == 3);
    ev.events = EPOLLOUT;
    ev.data.u64 = 5;
    r = r * 10 + (epoll_ctl(ep, EPOLL_CTL_MOD, d, &ev) == 0);
    r = r * 10 + (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == 0);
    errno = 0;
    r = r * 10 + (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == -1 && errno == ENOENT);
    n = epoll_wait(ep, out, 4, 5000);
    r = r * 10 + (n == 1 && out[0].data.u64 == 5 && out[0].events == EPOLLOUT);
    char b[1];
    if (read(fd, b, 1) != 1) return -4;
    close(d);
    close(ep);
    return r;
}

/* poll over two descriptors of one socket asking different events: the echo of a byte
 * wakes the wait for the one that asked POLLIN (not only at the timeout). */
static long poll_dup(int fd) {
    int d = dup(fd);
    if (d < 0 || write(fd, "q", 1) != 1) return -2;
    struct pollfd p[2] = {{.fd = fd, .events = POLLPRI}, {.fd = d, .events = POLLIN}};
    double t0 = now_ms();
    int n = poll(p, 2, 3000);
    double waited = now_ms() - t0;
    char b[1];
    if (read(fd, b, 1) != 1 || close(d) != 0) return -3;
    return n * 100 + (p[0].revents == 0) * 10 + (p[1].revents == POLLIN && waited < 1500);
}

static volatile sig_atomic_t usr1_seen;
static void on_usr1(int sig) { (void)sig; usr1_seen++; }
static pthread_t main_thread;

static void *usr1_later(void *arg) {
    (void)arg;
    usleep(150000);
    pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

/* ppoll and pselect with SIGUSR1 blocked and unblocked by their mask, on a socket with
 * nothing to read: a signal pending before the call ends it at once with EINTR (the
 * handler run), one sent during the wait too; the caller's own mask (SIGUSR1 blocked)
 * leaves it pending: a 100 ms timeout, then 0. With the socket readable, the ready count
 * wins over a pending signal. select's timeout is written back: zero after a timeout,
 * the time left after an early return. Each step a digit. */
static long sigmasks(int fd) {
    sigset_t block, shut, open_, old;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pthread_sigmask(SIG_BLOCK, NULL, &shut); /* SIGUSR1 blocked */
    open_ = shut;
    sigdelset(&open_, SIGUSR1);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct timespec two = {2, 0}, tenth = {0, 100000000};
    fd_set r;
    long res = 0;
    /* pending before */
    usr1_seen = 0;
    raise(SIGUSR1);
    double t0 = now_ms();
    errno = 0;
    res = res * 10 + (ppoll(&p, 1, &two, &open_) == -1 && errno == EINTR && usr1_seen == 1);
    raise(SIGUSR1);
    FD_ZERO(&r);
    FD_SET(fd, &r);
    errno = 0;
    res = res * 10 + (pselect(fd + 1, &r, NULL, NULL, &two, &open_) == -1 && errno == EINTR &&
                      usr1_seen == 2);
    res = res * 10 + (now_ms() - t0 < 1000);
    /* sent during the wait */
    pthread_t th;
    main_thread = pthread_self();
    pthread_create(&th, NULL, usr1_later, NULL);
    t0 = now_ms();
    errno = 0;
    res = res * 10 + (ppoll(&p, 1, &two, &open_) == -1 && errno == EINTR && usr1_seen == 3);
    res = res * 10 + (now_ms() - t0 < 1500);
    pthread_join(th, NULL);
    pthread_create(&th, NULL, usr1_later, NULL);
    FD_ZERO(&r);
    FD_SET(fd, &r);
    errno = 0;
    res = res * 10 + (pselect(fd + 1, &r, NULL, NULL, &two, &open_) == -1 && errno == EINTR &&
                      usr1_seen == 4);
    pthread_join(th, NULL);
    /* the caller's mask: stays pending */
    raise(SIGUSR1);
    res = res * 10 + (ppoll(&p, 1, &tenth, &shut) == 0 && usr1_seen == 4);
    /* ready wins over the pending signal */
    if (write(fd, "s", 1) != 1 || readable(fd, 1) != 1) return -2;
    res = res * 10 + (ppoll(&p, 1, &two, &open_) == 1 && usr1_seen == 4);
    pthread_sigmask(SIG_SETMASK, &old, NULL); /* delivered now */
    res = res * 10 + (usr1_seen == 5);
    /* select's timeout: the time left */
    FD_ZERO(&r);
    FD_SET(fd, &r);
    struct timeval tv = {5, 0};
    res = res * 10 + select(fd + 1, &r, NULL, NULL, &tv);
    res = res * 10 + (tv.tv_sec < 5 && tv.tv_sec >= 1);
    char b[1];
    if (read(fd, b, 1) != 1) return -3;
    FD_ZERO(&r);
    FD_SET(fd, &r);
    tv = (struct timeval){0, 150000};
    res = res * 10 + (select(fd + 1, &r, NULL, NULL, &tv) == 0 && tv.tv_sec == 0 && tv.tv_usec == 0);
    /* an invalid timespec */
    struct timespec bad = {0, 1000000000};
    errno = 0;
    res = res * 10 + (ppoll(&p, 1, &bad, &open_) == -1 && errno == EINVAL);
    errno = 0;
    res = res * 10 + (pselect(fd + 1, &r, NULL, NULL, &bad, &open_) == -1 && errno == EINVAL);
    return res;
}

/* The kernel's UDP echo: an IPv6 loopback socket answering each datagram. */
static void *kernel_udp_echo(void *arg) {
    int s = *(int *)arg;
    for (;;) {
        char b[2048];
        struct sockaddr_in6 from;
        socklen_t len = sizeof from;
        ssize_t n = recvfrom(s, b, sizeof b, 0, SA(from), &len);
        if (n < 0) return NULL;
        sendto(s, b, (size_t)n, 0, SA(from), len);
    }
}

/* sendmmsg of three datagrams to the echo, recvmmsg of them back (MSG_WAITFORONE, five
 * slots, until three came: the echo may answer in any order): each one, whole, with a
 * sender's address of the socket's family. The result: sent * 100 + received * 10 + ok. */
static long mmsg_dgram(int fd) {
    const char *out[3] = {"one", "two!", "three"};
    struct mmsghdr m[5];
    struct iovec iv[5];
    char in[5][16];
    struct sockaddr_storage from[5];
    memset(m, 0, sizeof m);
    for (int i = 0; i < 3; i++) {
        iv[i] = (struct iovec){(void *)out[i], strlen(out[i])};
        m[i].msg_hdr.msg_iov = &iv[i];
        m[i].msg_hdr.msg_iovlen = 1;
    }
    int sent = sendmmsg(fd, m, 3, 0);
    if (sent != 3 || m[1].msg_len != 4 || m[2].msg_len != 5) return -2;
    int got = 0, seen = 0, ok = 1;
    while (got < 3) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) != 1) return -3;
        memset(m, 0, sizeof m);
        for (int i = 0; i < 5; i++) {
            iv[i] = (struct iovec){in[i], sizeof in[i]};
            m[i].msg_hdr.msg_iov = &iv[i];
            m[i].msg_hdr.msg_iovlen = 1;
            m[i].msg_hdr.msg_name = &from[i];
            m[i].msg_hdr.msg_namelen = sizeof from[i];
        }
        int n = recvmmsg(fd, m, 5, MSG_WAITFORONE, NULL);
        if (n < 1) return -4;
        for (int i = 0; i < n; i++) {
            int which = -1;
            for (int j = 0; j < 3; j++)
                if (m[i].msg_len == strlen(out[j]) && memcmp(in[i], out[j], m[i].msg_len) == 0)
                    which = j;
            ok = ok && which >= 0 && !(seen & (1 << which));
            if (which >= 0) seen |= 1 << which;
            int fam = ((struct sockaddr *)&from[i])->sa_family;
            ok = ok && m[i].msg_hdr.msg_namelen ==
                           (fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
        }
        got += n;
    }
    errno = 0;
    ok = ok && recvmmsg(fd, m, 5, MSG_DONTWAIT, NULL) == -1 && errno == EAGAIN;
    return sent * 100 + got * 10 + ok;
}

/* MSG_PEEK on a datagram socket: the datagram stays (a shorter peek cuts it, the whole one
 * comes next), with its sender; nothing queued: EAGAIN. Each step a digit. */
static long udp_peek(int fd) {
    char b[16];
    struct sockaddr_storage from;
    socklen_t len = sizeof from;
    if (send(fd, "peek", 4, 0) != 4) return -2;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 5000) != 1) return -3;
    long r = recv(fd, b, 2, MSG_PEEK);
    r = r * 10 + recvfrom(fd, b, sizeof b, MSG_PEEK, SA(from), &len);
    int fam = ((struct sockaddr *)&from)->sa_family;
    r = r * 10 + (len == (fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)));
    r = r * 10 + recv(fd, b, sizeof b, 0);
    r = r * 10 + (memcmp(b, "peek", 4) == 0);
    errno = 0;
    r = r * 10 + (recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT) == -1 && errno == EAGAIN);
    return r;
}

static void more_side_by_side(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    int u = ustack_conn(), k = kernel_conn();
    BOTH(mmsg_stream(X));
    BOTH(mmsg_partial(X));
    BOTH(mmsg_timeout(X));
    BOTH(peeks(X));
    BOTH(oob(X));
    BOTH(epoll_dup(X));
    BOTH(poll_dup(X));
    BOTH(sigmasks(X));
    BOTH(close(X));
    /* Datagrams: ustack's to the kernel's echo over TUN, the kernel's to an IPv6 one. */
    static int ks;
    struct sockaddr_in6 a6;
    ks = loopback6(SOCK_DGRAM, &a6);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, kernel_udp_echo, &ks) == 0);
    CHECK(pthread_detach(t) == 0);
    u = socket(AF_INET, SOCK_DGRAM, 0);
    k = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in to = sin4("192.0.2.1", 7);
    CHECK(connect(u, SA(to), sizeof to) == 0 && connect(k, SA(a6), sizeof a6) == 0);
    BOTH(mmsg_dgram(X));
    BOTH(udp_peek(X));
    /* ustack: MSG_OOB is EOPNOTSUPP as on Linux's IPv4 UDP (`udp_sendmsg`; its IPv6 UDP
     * takes it). */
    FAILS(send(u, "x", 1, MSG_OOB), EOPNOTSUPP);
    BOTH(close(X));
}

int main(void) {
    errors_side_by_side();
    side_by_side();
    more_side_by_side();
    int c = client();
    epoll_mixed(c);
    poll_mixed(c);
    fork_refused(c);
    CHECK(close(c) == 0);
    server();
    printf("every call checked\n");
    return 0;
}
