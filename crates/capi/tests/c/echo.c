/* Blocking echo over a sim pair: a server thread accepts and echoes; the client sends
 * 1 MiB of a known pattern (write and writev) and reads it back (read, readv, recv),
 * checking every byte; then names, TCP_INFO, and the end of stream. */
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/uio.h>

#include "check.h"

#define TOTAL (1 << 20)

static int listener;
static struct sockaddr_in accepted_peer;

static void *serve(void *arg) {
    (void)arg;
    socklen_t len = sizeof accepted_peer;
    int c = ustack_accept(listener, SA(accepted_peer), &len);
    CHECK(c >= 0);
    CHECK(len == sizeof(struct sockaddr_in));
    char buf[7000];
    for (;;) {
        ssize_t n = ustack_read(c, buf, sizeof buf);
        CHECK(n >= 0);
        if (n == 0) break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = ustack_write(c, buf + off, (size_t)(n - off));
            CHECK(w > 0);
            off += w;
        }
    }
    CHECK(ustack_close(c) == 0);
    return NULL;
}

static unsigned char pattern(size_t i) { return (unsigned char)((i * 7 + i / 251) & 0xff); }

static size_t got;
static void *reader(void *arg) {
    int c = *(int *)arg;
    unsigned char a[3000], b[1500];
    while (got < TOTAL) {
        ssize_t n;
        if (got % 3 == 0) {
            struct iovec iov[2] = {{a, sizeof a}, {b, sizeof b}};
            n = ustack_readv(c, iov, 2);
            CHECK(n > 0);
            for (ssize_t i = 0; i < n; i++) {
                unsigned char x = i < (ssize_t)sizeof a ? a[i] : b[i - sizeof a];
                CHECK(x == pattern(got + (size_t)i));
            }
        } else {
            n = ustack_recv(c, a, sizeof a, 0);
            CHECK(n > 0);
            for (ssize_t i = 0; i < n; i++) CHECK(a[i] == pattern(got + (size_t)i));
        }
        got += (size_t)n;
    }
    return NULL;
}

int main(void) {
    ustack_t *client;
    ustack_t *server = open_pair(&client);
    listener = listen_on(server, 7);
    pthread_t st, rt;
    CHECK(pthread_create(&st, NULL, serve, NULL) == 0);

    int c = connect_to(client, "10.0.0.1", 7);
    struct sockaddr_in to = sin4("10.0.0.1", 7);
    int one = 1;
    CHECK(ustack_setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);

    struct sockaddr_in me, peer;
    socklen_t len = sizeof me;
    CHECK(ustack_getsockname(c, SA(me), &len) == 0 && len == sizeof me);
    CHECK(me.sin_addr.s_addr == sin4("10.0.0.2", 0).sin_addr.s_addr && me.sin_port != 0);
    len = sizeof peer;
    CHECK(ustack_getpeername(c, SA(peer), &len) == 0);
    CHECK(peer.sin_port == htons(7) && peer.sin_addr.s_addr == to.sin_addr.s_addr);

    struct tcp_info ti;
    len = sizeof ti;
    CHECK(ustack_getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
    CHECK(ti.tcpi_state == TCP_ESTABLISHED);
    CHECK(ti.tcpi_snd_mss > 0 && ti.tcpi_snd_cwnd > 0);

    CHECK(pthread_create(&rt, NULL, reader, &c) == 0);
    static unsigned char out[TOTAL];
    for (size_t i = 0; i < TOTAL; i++) out[i] = pattern(i);
    size_t sent = 0;
    while (sent < TOTAL) {
        size_t chunk = TOTAL - sent < 20000 ? TOTAL - sent : 20000;
        ssize_t w;
        if (sent % 2 == 0) {
            struct iovec iov[2] = {{out + sent, chunk / 2}, {out + sent + chunk / 2, chunk - chunk / 2}};
            w = ustack_writev(c, iov, 2);
        } else {
            w = ustack_write(c, out + sent, chunk);
        }
        CHECK(w > 0);
        sent += (size_t)w;
    }
    CHECK(pthread_join(rt, NULL) == 0);
    CHECK(got == TOTAL);

    CHECK(ustack_shutdown(c, SHUT_WR) == 0);
    char x;
    CHECK(ustack_read(c, &x, 1) == 0); /* the server closes after our FIN: end of stream */
    CHECK(pthread_join(st, NULL) == 0);
    CHECK(accepted_peer.sin_addr.s_addr == me.sin_addr.s_addr && accepted_peer.sin_port == me.sin_port);
    CHECK(ustack_close(c) == 0);
    CHECK(ustack_close(listener) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("echo: %d bytes echoed and checked\n", TOTAL);
    return 0;
}
