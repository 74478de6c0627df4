/* Non-blocking use and epoll readiness over a sim pair: a non-blocking connect
 * (EINPROGRESS, EPOLLOUT once established, SO_ERROR 0), EPOLLIN on the listener and on
 * data, EAGAIN when drained, EPOLLRDHUP|EPOLLIN on the peer's FIN, fcntl and ioctl, poll. */
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include "check.h"

/* One epoll_wait of up to `ms`: the events of the one descriptor reported (0 if none). */
static unsigned wait_ms(int ep, unsigned long long want_data, int ms) {
    struct epoll_event ev[4];
    int n = ustack_epoll_wait(ep, ev, 4, ms);
    CHECK(n >= 0);
    for (int i = 0; i < n; i++)
        if (ev[i].data.u64 == want_data) return ev[i].events;
    return 0;
}

/* epoll_wait until `bits` are all reported for `data` (10 s at most). */
static unsigned wait_for(int ep, unsigned long long data, unsigned bits) {
    for (int i = 0; i < 10; i++) {
        unsigned e = wait_ms(ep, data, 1000);
        if ((e & bits) == bits) return e;
    }
    fprintf(stderr, "epoll: %#x never reported for %llu\n", bits, data);
    exit(1);
}

int main(void) {
    ustack_t *client;
    ustack_t *server = open_pair(&client);
    int l = listen_on(server, 80);
    CHECK(ustack_fcntl(l, F_SETFL, O_NONBLOCK) == 0);
    CHECK(ustack_fcntl(l, F_GETFL, 0) == (O_RDWR | O_NONBLOCK));
    CHECK_ERR(ustack_accept(l, NULL, NULL), EAGAIN);

    int sep = ustack_epoll_create1(EPOLL_CLOEXEC);
    CHECK(sep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 100};
    CHECK(ustack_epoll_ctl(sep, EPOLL_CTL_ADD, l, &ev) == 0);
    CHECK_ERR(ustack_epoll_ctl(sep, EPOLL_CTL_ADD, l, &ev), EEXIST);
    CHECK(wait_ms(sep, 100, 100) == 0); /* nothing to accept yet */

    /* The non-blocking connect. */
    int c = ustack_socket_on(client, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(c >= 0);
    CHECK(ustack_fcntl(c, F_GETFL, 0) == (O_RDWR | O_NONBLOCK));
    struct sockaddr_in to = sin4("10.0.0.1", 80);
    CHECK_ERR(ustack_connect(c, SA(to), sizeof to), EINPROGRESS);
    int cep = ustack_epoll_create1(0);
    CHECK(cep >= 0);
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    ev.data.u64 = 200;
    CHECK(ustack_epoll_ctl(cep, EPOLL_CTL_ADD, c, &ev) == 0);
    unsigned e = wait_for(cep, 200, EPOLLOUT);
    CHECK(!(e & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)));
    int err = -1;
    socklen_t len = sizeof err;
    CHECK(ustack_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0);
    CHECK(err == 0 && len == sizeof err);
    struct tcp_info ti;
    len = sizeof ti;
    CHECK(ustack_getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
    CHECK(ti.tcpi_state == TCP_ESTABLISHED);
    CHECK_ERR(ustack_connect(c, SA(to), sizeof to), EISCONN);

    /* The listener becomes readable; accept4 a non-blocking stream. */
    wait_for(sep, 100, EPOLLIN);
    struct sockaddr_in peer;
    len = sizeof peer;
    int s = ustack_accept4(l, SA(peer), &len, SOCK_NONBLOCK);
    CHECK(s >= 0);
    CHECK(peer.sin_addr.s_addr == sin4("10.0.0.2", 0).sin_addr.s_addr);
    CHECK(ustack_fcntl(s, F_GETFL, 0) == (O_RDWR | O_NONBLOCK));
    len = sizeof ti;
    CHECK(ustack_getsockopt(l, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
    CHECK(ti.tcpi_state == TCP_LISTEN);
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = 300;
    CHECK(ustack_epoll_ctl(sep, EPOLL_CTL_ADD, s, &ev) == 0);
    char buf[64];
    CHECK_ERR(ustack_read(s, buf, sizeof buf), EAGAIN);
    CHECK(wait_ms(sep, 300, 100) == 0);

    /* Data: EPOLLIN, FIONREAD, then EAGAIN once drained. */
    CHECK(ustack_write(c, "hello", 5) == 5);
    e = wait_for(sep, 300, EPOLLIN);
    CHECK(!(e & EPOLLRDHUP));
    int avail = 0;
    CHECK(ustack_ioctl(s, FIONREAD, &avail) == 0 && avail == 5);
    CHECK(ustack_read(s, buf, sizeof buf) == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK_ERR(ustack_read(s, buf, sizeof buf), EAGAIN);

    /* poll agrees: writable, not readable; then readable after more data. */
    struct pollfd p = {.fd = s, .events = POLLIN | POLLOUT};
    CHECK(ustack_poll(&p, 1, 0) == 1 && p.revents == POLLOUT);
    CHECK(ustack_write(c, "x", 1) == 1);
    p.events = POLLIN;
    CHECK(ustack_poll(&p, 1, 5000) == 1 && p.revents == POLLIN);
    CHECK(ustack_read(s, buf, sizeof buf) == 1);

    /* FIONBIO off: a blocking read gives the byte written before it. */
    int off = 0;
    CHECK(ustack_ioctl(s, FIONBIO, &off) == 0);
    CHECK(ustack_fcntl(s, F_GETFL, 0) == O_RDWR);
    CHECK(ustack_write(c, "y", 1) == 1);
    CHECK(ustack_read(s, buf, 1) == 1 && buf[0] == 'y');

    /* The peer's FIN: EPOLLIN | EPOLLRDHUP, and read gives end of stream. */
    CHECK(ustack_shutdown(c, SHUT_WR) == 0);
    e = wait_for(sep, 300, EPOLLIN | EPOLLRDHUP);
    CHECK(ustack_read(s, buf, sizeof buf) == 0);
    /* tcpi_state follows: the server in CLOSE_WAIT, the client (FIN acknowledged) in
     * FIN_WAIT2. */
    len = sizeof ti;
    CHECK(ustack_getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
    CHECK(ti.tcpi_state == TCP_CLOSE_WAIT);
    for (int i = 0; i < 100; i++) {
        len = sizeof ti;
        CHECK(ustack_getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
        if (ti.tcpi_state == TCP_FIN_WAIT2) break;
        CHECK(ti.tcpi_state == TCP_FIN_WAIT1);
        struct pollfd none = {.fd = -1};
        ustack_poll(&none, 1, 10);
    }
    CHECK(ti.tcpi_state == TCP_FIN_WAIT2);
    /* The client still writable; EPOLL_CTL_DEL stops the reports. */
    CHECK(ustack_epoll_ctl(cep, EPOLL_CTL_DEL, c, NULL) == 0);
    CHECK_ERR(ustack_epoll_ctl(cep, EPOLL_CTL_DEL, c, NULL), ENOENT);

    CHECK(ustack_close(s) == 0);
    CHECK(ustack_close(c) == 0);
    CHECK(ustack_close(l) == 0);
    CHECK(ustack_close(sep) == 0 && ustack_close(cep) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("epoll: non-blocking connect, readiness and FIN checked\n");
    return 0;
}
