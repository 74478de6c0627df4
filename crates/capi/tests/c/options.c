/* Socket options that change what the stack does, over a sim pair whose configuration
 * sets a sysctl: SO_RCVBUF/SO_SNDBUF (Linux's doubling), SO_KEEPALIVE, TCP_NODELAY,
 * TCP_MAXSEG (set: the MSS sent with), TCP_KEEPIDLE/TCP_KEEPINTVL/TCP_KEEPCNT (the
 * sysctl, then the socket's own; EINVAL out of Linux's bounds), TCP_CORK, SO_RCVTIMEO
 * (EAGAIN when it runs out),
 * SO_LINGER 0 (close resets: the peer reads ECONNRESET), SO_TYPE. */
#include <netinet/tcp.h>
#include <sys/time.h>
#include <time.h>

#include "check.h"

static int get_int(int fd, int level, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    CHECK(ustack_getsockopt(fd, level, name, &v, &len) == 0 && len == sizeof v);
    return v;
}

static void set_int(int fd, int level, int name, int v) {
    CHECK(ustack_setsockopt(fd, level, name, &v, sizeof v) == 0);
}

int main(void) {
    ustack_t *server = ustack_stack_open(
        "link=sim addr=10.0.0.1/24 peer=10.0.0.2/24 sysctl.net.ipv4.tcp_keepalive_time=600");
    CHECK(server != NULL);
    ustack_t *client = ustack_stack_peer(server);
    int l = listen_on(server, 22);
    int c = ustack_socket_on(client, AF_INET, SOCK_STREAM, 0);
    CHECK(get_int(c, SOL_SOCKET, SO_TYPE) == SOCK_STREAM);
    set_int(c, IPPROTO_TCP, TCP_NODELAY, 1); /* before connect: applied when it exists */
    struct sockaddr_in to = sin4("10.0.0.1", 22);
    CHECK(ustack_connect(c, SA(to), sizeof to) == 0);
    int s = ustack_accept(l, NULL, NULL);
    CHECK(s >= 0);

    CHECK(get_int(c, IPPROTO_TCP, TCP_NODELAY) == 1);
    int mss = get_int(c, IPPROTO_TCP, TCP_MAXSEG);
    CHECK(mss >= 536 && mss <= 1460);
    CHECK(get_int(c, IPPROTO_TCP, TCP_KEEPIDLE) == 600);
    set_int(c, IPPROTO_TCP, TCP_KEEPIDLE, 30);
    CHECK(get_int(c, IPPROTO_TCP, TCP_KEEPIDLE) == 30);
    set_int(c, IPPROTO_TCP, TCP_KEEPINTVL, 5);
    CHECK(get_int(c, IPPROTO_TCP, TCP_KEEPINTVL) == 5);
    set_int(c, IPPROTO_TCP, TCP_KEEPCNT, 3);
    CHECK(get_int(c, IPPROTO_TCP, TCP_KEEPCNT) == 3);
    int v = 0; /* Linux: 1 to 32767 seconds */
    CHECK_ERR(ustack_setsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof v), EINVAL);
    v = 128; /* Linux: at most 127 probes */
    CHECK_ERR(ustack_setsockopt(c, IPPROTO_TCP, TCP_KEEPCNT, &v, sizeof v), EINVAL);
    CHECK(get_int(c, IPPROTO_TCP, TCP_KEEPIDLE) == 30);
    set_int(c, IPPROTO_TCP, TCP_MAXSEG, 536);
    CHECK(get_int(c, IPPROTO_TCP, TCP_MAXSEG) <= 536);
    set_int(c, IPPROTO_TCP, TCP_CORK, 1);
    CHECK(get_int(c, IPPROTO_TCP, TCP_CORK) == 1);
    set_int(c, IPPROTO_TCP, TCP_CORK, 0);
    set_int(c, SOL_SOCKET, SO_KEEPALIVE, 1);
    CHECK(get_int(c, SOL_SOCKET, SO_KEEPALIVE) == 1);
    set_int(s, SOL_SOCKET, SO_RCVBUF, 10000);
    CHECK(get_int(s, SOL_SOCKET, SO_RCVBUF) == 20000);
    set_int(c, SOL_SOCKET, SO_SNDBUF, 1000);
    CHECK(get_int(c, SOL_SOCKET, SO_SNDBUF) == 4608); /* at least SOCK_MIN_SNDBUF */

    /* SO_RCVTIMEO: a blocking read with nothing to read gives EAGAIN after ~100 ms. */
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    CHECK(ustack_setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    struct timeval back;
    socklen_t len = sizeof back;
    CHECK(ustack_getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &back, &len) == 0);
    CHECK(back.tv_sec == 0 && back.tv_usec == 100000);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char buf[16];
    CHECK_ERR(ustack_read(s, buf, sizeof buf), EAGAIN);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(waited >= 0.09);

    /* SO_LINGER with zero time: close resets, the peer's read fails with ECONNRESET. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    CHECK(ustack_setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
    struct linger lb;
    len = sizeof lb;
    CHECK(ustack_getsockopt(c, SOL_SOCKET, SO_LINGER, &lb, &len) == 0 && lb.l_onoff == 1 && lb.l_linger == 0);
    CHECK(ustack_close(c) == 0);
    tv.tv_sec = 5;
    tv.tv_usec = 0;
    CHECK(ustack_setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    CHECK_ERR(ustack_read(s, buf, sizeof buf), ECONNRESET);

    CHECK(ustack_close(s) == 0 && ustack_close(l) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("options: every option checked\n");
    return 0;
}
