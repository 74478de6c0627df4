/* AF_INET6 over a sim pair of dual-stack stacks: a listener on [::] with sockaddr_in6 in
 * bind/accept/getsockname/getpeername, an IPv6 client and an IPv4 client (the latter seen
 * as ::ffff:10.0.0.2 by the AF_INET6 side, at both ends of the accepted socket, as Linux),
 * IPV6_V6ONLY (get/set, EINVAL once bound, the IPv4 client then refused), an AF_INET6
 * client connecting to ::ffff:10.0.0.1 over IPv4, UDP over IPv6 with sockaddr_in6 senders,
 * and the errno Linux gives where families mismatch. */
#include <netinet/tcp.h>

#include "check.h"

static struct sockaddr_in6 sin6(const char *ip, int port) {
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    a.sin6_port = htons((unsigned short)port);
    CHECK(inet_pton(AF_INET6, ip, &a.sin6_addr) == 1);
    return a;
}

static int same6(const struct sockaddr_in6 *a, const char *ip, int port) {
    struct sockaddr_in6 b = sin6(ip, port);
    return a->sin6_family == AF_INET6 && memcmp(&a->sin6_addr, &b.sin6_addr, 16) == 0 &&
           (port < 0 || a->sin6_port == b.sin6_port);
}

/* Send `msg` over `c`, read it back through the echo at `s`. */
static void echo_once(int c, int s, const char *msg) {
    size_t n = strlen(msg);
    char buf[64];
    CHECK(ustack_send(c, msg, n, 0) == (ssize_t)n);
    CHECK(ustack_recv(s, buf, n, MSG_WAITALL) == (ssize_t)n);
    CHECK(ustack_send(s, buf, n, 0) == (ssize_t)n);
    CHECK(ustack_recv(c, buf, n, MSG_WAITALL) == (ssize_t)n && memcmp(buf, msg, n) == 0);
}

int main(void) {
    ustack_t *client;
    ustack_t *server = ustack_stack_open(
        "link=sim addr=10.0.0.1/24 peer=10.0.0.2/24 addr6=2001:db8::1/64 peer6=2001:db8::2/64 "
        "sysctl.net.ipv6.conf.default.accept_dad=0");
    CHECK(server != NULL);
    client = ustack_stack_peer(server);
    CHECK(client != NULL);

    /* A dual-stack listener: [::]:8080, sockaddr_in6 back from getsockname. */
    int l = ustack_socket_on(server, AF_INET6, SOCK_STREAM, 0);
    CHECK(l >= 0);
    int v = -1;
    socklen_t vl = sizeof v;
    CHECK(ustack_getsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &v, &vl) == 0 && v == 0);
    CHECK(ustack_getsockopt(l, SOL_SOCKET, SO_DOMAIN, &v, &vl) == 0 && v == AF_INET6);
    CHECK(ustack_getsockopt(l, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &v, &vl) == 0 && v == 64);
    struct sockaddr_in6 any = sin6("::", 8080);
    CHECK(ustack_bind(l, SA(any), sizeof any) == 0);
    /* IPV6_V6ONLY is fixed once bound (Linux: EINVAL). */
    int one = 1;
    CHECK_ERR(ustack_setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one), EINVAL);
    CHECK(ustack_listen(l, 16) == 0);
    struct sockaddr_in6 name;
    socklen_t len = sizeof name;
    CHECK(ustack_getsockname(l, SA(name), &len) == 0);
    CHECK(len == sizeof(struct sockaddr_in6) && same6(&name, "::", 8080));

    /* An IPv6 client. */
    int c6 = ustack_socket_on(client, AF_INET6, SOCK_STREAM, 0);
    CHECK(c6 >= 0);
    struct sockaddr_in6 to6 = sin6("2001:db8::1", 8080);
    CHECK(ustack_connect(c6, SA(to6), sizeof to6) == 0);
    struct sockaddr_in6 peer;
    len = sizeof peer;
    int s6 = ustack_accept(l, SA(peer), &len);
    CHECK(s6 >= 0);
    struct sockaddr_in6 c6name;
    socklen_t c6len = sizeof c6name;
    CHECK(ustack_getsockname(c6, SA(c6name), &c6len) == 0);
    CHECK(c6len == sizeof c6name && same6(&c6name, "2001:db8::2", -1) && c6name.sin6_port != 0);
    CHECK(len == sizeof peer && same6(&peer, "2001:db8::2", -1) &&
          peer.sin6_port == c6name.sin6_port);
    len = sizeof name;
    CHECK(ustack_getsockname(s6, SA(name), &len) == 0 && same6(&name, "2001:db8::1", 8080));
    len = sizeof name;
    CHECK(ustack_getpeername(c6, SA(name), &len) == 0 && len == sizeof name &&
          same6(&name, "2001:db8::1", 8080));
    echo_once(c6, s6, "over IPv6");

    /* An IPv4 client of the same listener: v4-mapped on the AF_INET6 side. */
    int c4 = connect_to(client, "10.0.0.1", 8080);
    struct sockaddr_in c4name;
    len = sizeof c4name;
    CHECK(ustack_getsockname(c4, SA(c4name), &len) == 0 && len == sizeof c4name &&
          c4name.sin_family == AF_INET);
    len = sizeof peer;
    int s4 = ustack_accept(l, SA(peer), &len);
    CHECK(s4 >= 0);
    CHECK(len == sizeof peer && same6(&peer, "::ffff:10.0.0.2", -1) &&
          peer.sin6_port == c4name.sin_port);
    len = sizeof name;
    CHECK(ustack_getsockname(s4, SA(name), &len) == 0 && len == sizeof name &&
          same6(&name, "::ffff:10.0.0.1", 8080));
    len = sizeof name;
    CHECK(ustack_getpeername(s4, SA(name), &len) == 0 && same6(&name, "::ffff:10.0.0.2", -1));
    echo_once(c4, s4, "over IPv4");

    /* IPV6_V6ONLY before bind: the IPv4 client finds nobody, the IPv6 one gets in. */
    int lo = ustack_socket_on(server, AF_INET6, SOCK_STREAM, 0);
    CHECK(ustack_setsockopt(lo, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0);
    vl = sizeof v;
    CHECK(ustack_getsockopt(lo, IPPROTO_IPV6, IPV6_V6ONLY, &v, &vl) == 0 && v == 1);
    struct sockaddr_in6 any2 = sin6("::", 8081);
    CHECK(ustack_bind(lo, SA(any2), sizeof any2) == 0);
    CHECK(ustack_listen(lo, 4) == 0);
    int r4 = ustack_socket_on(client, AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to4 = sin4("10.0.0.1", 8081);
    CHECK_ERR(ustack_connect(r4, SA(to4), sizeof to4), ECONNREFUSED);
    int r6 = ustack_socket_on(client, AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 to6b = sin6("2001:db8::1", 8081);
    CHECK(ustack_connect(r6, SA(to6b), sizeof to6b) == 0);
    int a6 = ustack_accept(lo, NULL, NULL);
    CHECK(a6 >= 0);

    /* An AF_INET6 client to ::ffff:10.0.0.1 (an IPv4 listener): over IPv4, v4-mapped. */
    int l4 = listen_on(server, 9000);
    int m = ustack_socket_on(client, AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 mapped = sin6("::ffff:10.0.0.1", 9000);
    CHECK(ustack_connect(m, SA(mapped), sizeof mapped) == 0);
    len = sizeof name;
    CHECK(ustack_getsockname(m, SA(name), &len) == 0 && same6(&name, "::ffff:10.0.0.2", -1));
    struct sockaddr_in p4;
    len = sizeof p4;
    int ms = ustack_accept(l4, SA(p4), &len);
    CHECK(ms >= 0 && len == sizeof p4 && p4.sin_family == AF_INET && p4.sin_port == name.sin6_port);
    echo_once(m, ms, "mapped");
    /* ... but not from a V6ONLY socket (Linux tcp_v6_connect: ENETUNREACH). */
    int mo = ustack_socket_on(client, AF_INET6, SOCK_STREAM, 0);
    CHECK(ustack_setsockopt(mo, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0);
    CHECK_ERR(ustack_connect(mo, SA(mapped), sizeof mapped), ENETUNREACH);

    /* Families mismatched, as Linux answers. */
    int i4 = ustack_socket_on(client, AF_INET, SOCK_STREAM, 0);
    CHECK_ERR(ustack_connect(i4, SA(to6), sizeof to6), EAFNOSUPPORT);
    CHECK_ERR(ustack_bind(i4, SA(any), sizeof any), EAFNOSUPPORT);
    CHECK_ERR(ustack_setsockopt(i4, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one), ENOPROTOOPT);
    CHECK_ERR(ustack_getsockopt(i4, IPPROTO_IPV6, IPV6_V6ONLY, &v, &vl), ENOPROTOOPT);
    int i6 = ustack_socket_on(client, AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in here4 = sin4("10.0.0.2", 0);
    /* A sockaddr_in is shorter than SIN6_LEN_RFC2133: EINVAL (inet6_bind). */
    CHECK_ERR(ustack_bind(i6, SA(here4), sizeof here4), EINVAL);
    CHECK_ERR(ustack_connect(i6, SA(to6), 20), EINVAL);
    struct sockaddr_in6 notmine = sin6("2001:db8::77", 0);
    CHECK_ERR(ustack_bind(i6, SA(notmine), sizeof notmine), EADDRNOTAVAIL);

    /* UDP over IPv6: the sender as a sockaddr_in6; an AF_INET6 UDP socket may sendto a
     * sockaddr_in (over IPv4, Linux udpv6_sendmsg) and hears the reply v4-mapped. */
    int us = ustack_socket_on(server, AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 uany = sin6("::", 5353);
    CHECK(ustack_bind(us, SA(uany), sizeof uany) == 0);
    int uc = ustack_socket_on(client, AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 uto = sin6("2001:db8::1", 5353);
    CHECK(ustack_sendto(uc, "ping6", 5, 0, SA(uto), sizeof uto) == 5);
    char buf[16];
    struct sockaddr_in6 from;
    len = sizeof from;
    CHECK(ustack_recvfrom(us, buf, sizeof buf, 0, SA(from), &len) == 5 &&
          memcmp(buf, "ping6", 5) == 0);
    CHECK(len == sizeof from && same6(&from, "2001:db8::2", -1) && from.sin6_port != 0);
    CHECK(ustack_sendto(us, "pong6", 5, 0, SA(from), len) == 5);
    struct sockaddr_in6 src;
    len = sizeof src;
    CHECK(ustack_recvfrom(uc, buf, sizeof buf, 0, SA(src), &len) == 5 &&
          memcmp(buf, "pong6", 5) == 0 && same6(&src, "2001:db8::1", 5353));
    struct sockaddr_in uto4 = sin4("10.0.0.1", 5353);
    CHECK(ustack_sendto(uc, "ping4", 5, 0, SA(uto4), sizeof uto4) == 5);
    len = sizeof from;
    CHECK(ustack_recvfrom(us, buf, sizeof buf, 0, SA(from), &len) == 5 &&
          same6(&from, "::ffff:10.0.0.2", -1));
    /* recvmsg's msg_name is a sockaddr_in6; a buffer too small for it is filled as far as
     * it goes and the length says 28, as getsockname(2). */
    CHECK(ustack_sendto(uc, "msg6", 4, 0, SA(uto), sizeof uto) == 4);
    struct iovec iov = {buf, sizeof buf};
    struct sockaddr_in6 mname;
    struct msghdr mh = {.msg_name = &mname, .msg_namelen = sizeof mname, .msg_iov = &iov, .msg_iovlen = 1};
    CHECK(ustack_recvmsg(us, &mh, 0) == 4 && memcmp(buf, "msg6", 4) == 0);
    CHECK(mh.msg_namelen == sizeof mname && same6(&mname, "2001:db8::2", -1));
    struct sockaddr_in small;
    len = sizeof small;
    CHECK(ustack_getsockname(uc, SA(small), &len) == 0 && len == sizeof(struct sockaddr_in6));
    CHECK(small.sin_family == AF_INET6);
    /* connect + getpeername with sockaddr_in6. */
    CHECK(ustack_connect(uc, SA(uto), sizeof uto) == 0);
    len = sizeof name;
    CHECK(ustack_getpeername(uc, SA(name), &len) == 0 && same6(&name, "2001:db8::1", 5353));
    CHECK(ustack_send(uc, "conn", 4, 0) == 4);
    CHECK(ustack_recv(us, buf, sizeof buf, 0) == 4 && memcmp(buf, "conn", 4) == 0);
    /* An AF_INET UDP socket cannot send to a sockaddr_in6. */
    int u4 = ustack_socket_on(client, AF_INET, SOCK_DGRAM, 0);
    CHECK_ERR(ustack_sendto(u4, "x", 1, 0, SA(uto), sizeof uto), EAFNOSUPPORT);

    int fds[] = {l, c6, s6, c4, s4, lo, r4, r6, a6, l4, m, ms, mo, i4, i6, us, uc, u4};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) CHECK(ustack_close(fds[i]) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("ipv6: AF_INET6, sockaddr_in6, dual-stack and IPV6_V6ONLY checked\n");
    return 0;
}
