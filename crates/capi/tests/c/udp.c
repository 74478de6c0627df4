/* UDP over a sim pair: sendto/recvfrom with the sender's address, sendmsg/recvmsg with
 * iovecs and msg_name, connect + send/recv, a non-blocking recv (EAGAIN), epoll EPOLLIN. */
#include <sys/epoll.h>
#include <sys/uio.h>

#include "check.h"

int main(void) {
    ustack_t *client;
    ustack_t *server = open_pair(&client);
    int s = ustack_socket_on(server, AF_INET, SOCK_DGRAM, 0);
    CHECK(s >= 0);
    struct sockaddr_in here = sin4("10.0.0.1", 5353);
    CHECK(ustack_bind(s, SA(here), sizeof here) == 0);
    int ep = ustack_epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
    CHECK(ustack_epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    CHECK_ERR(ustack_recv(s, &ev, 1, MSG_DONTWAIT), EAGAIN);

    /* sendto from an unbound socket: an ephemeral port, seen by recvfrom. */
    int c = ustack_socket_on(client, AF_INET, SOCK_DGRAM, 0);
    CHECK(c >= 0);
    CHECK(ustack_sendto(c, "ping", 4, 0, SA(here), sizeof here) == 4);
    struct epoll_event out;
    CHECK(ustack_epoll_wait(ep, &out, 1, 5000) == 1 && out.data.u64 == 1 && (out.events & EPOLLIN));
    char buf[16];
    struct sockaddr_in from;
    socklen_t len = sizeof from;
    CHECK(ustack_recvfrom(s, buf, sizeof buf, 0, SA(from), &len) == 4 && memcmp(buf, "ping", 4) == 0);
    struct sockaddr_in cname;
    socklen_t clen = sizeof cname;
    CHECK(ustack_getsockname(c, SA(cname), &clen) == 0);
    CHECK(len == sizeof from && from.sin_port == cname.sin_port && from.sin_port != 0);
    CHECK(from.sin_addr.s_addr == sin4("10.0.0.2", 0).sin_addr.s_addr);

    /* sendmsg back to the sender, in two pieces; recvmsg into two buffers. */
    struct iovec out_iov[2] = {{"po", 2}, {"ng!", 3}};
    struct msghdr m = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = out_iov, .msg_iovlen = 2};
    CHECK(ustack_sendmsg(s, &m, 0) == 5);
    char a[3], b[8];
    struct iovec in_iov[2] = {{a, sizeof a}, {b, sizeof b}};
    struct sockaddr_in src;
    struct msghdr r = {.msg_name = &src, .msg_namelen = sizeof src, .msg_iov = in_iov, .msg_iovlen = 2};
    CHECK(ustack_recvmsg(c, &r, 0) == 5);
    CHECK(memcmp(a, "pon", 3) == 0 && memcmp(b, "g!", 2) == 0);
    CHECK(r.msg_namelen == sizeof src && src.sin_port == htons(5353));

    /* connect, then send and recv without addresses. */
    CHECK(ustack_connect(c, SA(here), sizeof here) == 0);
    struct sockaddr_in p;
    len = sizeof p;
    CHECK(ustack_getpeername(c, SA(p), &len) == 0 && p.sin_port == htons(5353));
    CHECK(ustack_send(c, "again", 5, 0) == 5);
    CHECK(ustack_recv(s, buf, sizeof buf, 0) == 5 && memcmp(buf, "again", 5) == 0);

    CHECK(ustack_close(c) == 0 && ustack_close(s) == 0 && ustack_close(ep) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("udp: datagrams and addresses checked\n");
    return 0;
}
