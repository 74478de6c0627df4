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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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
    /* dup is refused on a ustack socket, with a clear errno; a kernel file dups. */
    FAILS(dup(s), EOPNOTSUPP);
    FAILS(dup2(s, 200), EOPNOTSUPP);
    FAILS(fcntl(s, F_DUPFD_CLOEXEC, 0), EOPNOTSUPP);
    int d = dup(k);
    CHECK(d > 2);
    CHECK(close(d) == 0);
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
    int c = -1;
    for (int i = 0; i < 100; i++) { /* the echo may not listen yet */
        c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
        CHECK(c > 2);
        if (connect(c, SA(to), sizeof to) == 0) break;
        CHECK(errno == ECONNREFUSED);
        CHECK(close(c) == 0);
        c = -1;
        usleep(100000);
    }
    CHECK(c > 2);
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

/* fork: the child has no ustack stack. Its calls on the inherited socket fail with
 * EBADFD, a new AF_INET socket with ENETDOWN, close only releases the number; the
 * parent's connection goes on. */
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
        if (socket(AF_INET, SOCK_STREAM, 0) != -1 || errno != ENETDOWN) _exit(4);
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

int main(void) {
    errors_side_by_side();
    int c = client();
    epoll_mixed(c);
    poll_mixed(c);
    fork_refused(c);
    CHECK(close(c) == 0);
    server();
    printf("every call checked\n");
    return 0;
}
