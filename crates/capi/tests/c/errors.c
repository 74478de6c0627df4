/* Errors with Linux's errno values: ECONNREFUSED (blocking, after which the socket may
 * connect again, and non-blocking through SO_ERROR, reported once), EISCONN, EBADF, ENOTCONN, EAGAIN, EADDRINUSE, EINVAL, ENOPROTOOPT,
 * EAFNOSUPPORT, and a bad configuration string. */
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include "check.h"

int main(void) {
    /* A bad config: NULL, errno EINVAL, and a message naming the word. */
    errno = 0;
    CHECK(ustack_stack_open("link=sim addr=10.0.0.1") == NULL && errno == EINVAL);
    CHECK(strstr(ustack_errmsg(), "addr=10.0.0.1") != NULL);

    ustack_t *client;
    ustack_t *server = open_pair(&client);
    struct sockaddr_in nobody = sin4("10.0.0.1", 9);

    /* ECONNREFUSED: nobody listens on port 9. */
    int c = ustack_socket_on(client, AF_INET, SOCK_STREAM, 0);
    CHECK(c >= 0);
    CHECK_ERR(ustack_connect(c, SA(nobody), sizeof nobody), ECONNREFUSED);
    /* The error was reported by connect: SO_ERROR is 0, and the socket may connect again
     * (Linux's goes back to CLOSE). */
    int err = -1;
    socklen_t len = sizeof err;
    CHECK(ustack_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
    int l10 = listen_on(server, 10);
    struct sockaddr_in ten = sin4("10.0.0.1", 10);
    CHECK(ustack_connect(c, SA(ten), sizeof ten) == 0);
    CHECK_ERR(ustack_connect(c, SA(ten), sizeof ten), EISCONN);
    CHECK(ustack_close(c) == 0);
    CHECK(ustack_close(l10) == 0);
    c = ustack_socket_on(client, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK_ERR(ustack_connect(c, SA(nobody), sizeof nobody), EINPROGRESS);
    struct pollfd p = {.fd = c, .events = POLLOUT};
    CHECK(ustack_poll(&p, 1, 5000) == 1);
    CHECK(p.revents & (POLLERR | POLLHUP));
    len = sizeof err;
    CHECK(ustack_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED);
    len = sizeof err;
    CHECK(ustack_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
    CHECK(ustack_close(c) == 0);

    /* EBADF: a closed descriptor, one never opened, a kernel one. */
    CHECK_ERR(ustack_close(c), EBADF);
    char b[8];
    CHECK_ERR(ustack_read(c, b, sizeof b), EBADF);
    CHECK_ERR(ustack_write(-1, b, 1), EBADF);
    CHECK_ERR(ustack_listen(0, 1), EBADF);
    CHECK(ustack_is_socket(0) == 0);

    /* ENOTCONN: reading or asking the peer of a socket not connected. */
    int s = ustack_socket_on(server, AF_INET, SOCK_STREAM, 0);
    CHECK(s >= 0 && ustack_is_socket(s) == 1);
    CHECK_ERR(ustack_recv(s, b, sizeof b, 0), ENOTCONN);
    struct sockaddr_in a;
    len = sizeof a;
    CHECK_ERR(ustack_getpeername(s, SA(a), &len), ENOTCONN);
    CHECK_ERR(ustack_shutdown(s, SHUT_RDWR), ENOTCONN);
    /* EPIPE: writing on it (Linux sk_stream_wait_connect). */
    CHECK_ERR(ustack_write(s, "x", 1), EPIPE);

    /* EADDRINUSE: two sockets on one port; EINVAL: binding twice, bad arguments. */
    struct sockaddr_in here = sin4("10.0.0.1", 8080);
    CHECK(ustack_bind(s, SA(here), sizeof here) == 0);
    CHECK_ERR(ustack_bind(s, SA(here), sizeof here), EINVAL);
    int s2 = ustack_socket_on(server, AF_INET, SOCK_STREAM, 0);
    CHECK_ERR(ustack_bind(s2, SA(here), sizeof here), EADDRINUSE);
    CHECK(ustack_listen(s, 4) == 0);
    CHECK_ERR(ustack_bind(s2, SA(here), sizeof here), EADDRINUSE);
    CHECK_ERR(ustack_bind(s2, SA(here), 4), EINVAL);
    struct sockaddr_in elsewhere = sin4("10.0.0.7", 1);
    CHECK_ERR(ustack_bind(s2, SA(elsewhere), sizeof elsewhere), EADDRNOTAVAIL);
    CHECK_ERR(ustack_accept(s2, NULL, NULL), EINVAL);
    CHECK_ERR(ustack_shutdown(s, 7), EINVAL);
    CHECK_ERR(ustack_fcntl(s, 0x7fff, 0), EINVAL); /* an unknown command */
    CHECK_ERR(ustack_socket_on(server, AF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT);
    /* The port is free again once the listener is closed. */
    CHECK(ustack_close(s) == 0);
    CHECK(ustack_bind(s2, SA(here), sizeof here) == 0);

    /* EAGAIN: a non-blocking accept with nothing queued. */
    CHECK(ustack_listen(s2, 4) == 0);
    int on = 1;
    CHECK(ustack_ioctl(s2, FIONBIO, &on) == 0);
    CHECK_ERR(ustack_accept(s2, NULL, NULL), EAGAIN);

    /* ENOPROTOOPT: an option ustack does not have; options keep their values. */
    CHECK_ERR(ustack_setsockopt(s2, IPPROTO_TCP, TCP_CONGESTION, "reno", 4), ENOPROTOOPT);
    CHECK_ERR(ustack_getsockopt(s2, SOL_IP, IP_TTL, &err, &len), ENOPROTOOPT);
    int v = 0;
    len = sizeof v;
    CHECK(ustack_getsockopt(s2, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v == 1);
    CHECK(ustack_setsockopt(s2, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0);
    CHECK(ustack_getsockopt(s2, SOL_SOCKET, SO_REUSEADDR, &v, &len) == 0 && v == 1);

    /* epoll errors. */
    int ep = ustack_epoll_create1(0);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN};
    CHECK_ERR(ustack_epoll_ctl(ep, EPOLL_CTL_MOD, s2, &ev), ENOENT);
    CHECK_ERR(ustack_epoll_ctl(ep, EPOLL_CTL_ADD, 12345, &ev), EBADF);
    CHECK_ERR(ustack_epoll_ctl(s2, EPOLL_CTL_ADD, s2, &ev), EINVAL);
    struct epoll_event out[1];
    CHECK_ERR(ustack_epoll_wait(ep, out, 0, 0), EINVAL);

    CHECK(ustack_close(ep) == 0 && ustack_close(s2) == 0);
    /* Closing a peer, NULL, or a stack twice is EINVAL, not a double free. */
    CHECK_ERR(ustack_stack_close(client), EINVAL);
    CHECK_ERR(ustack_stack_close(NULL), EINVAL);
    CHECK(ustack_stack_close(server) == 0);
    CHECK_ERR(ustack_stack_close(server), EINVAL);
    printf("errors: every errno checked\n");
    return 0;
}
