/* The kernel as the peer: a stack over the TUN interface tun0 in the namespace argv[1]
 * (192.0.2.2/24; the kernel's end is 192.0.2.1, where socat echoes on port 7). The client
 * sends 256 KiB of a known pattern and checks every byte it gets back. */
#include <netinet/tcp.h>
#include <unistd.h>

#include "check.h"

#define TOTAL (256 * 1024)

static unsigned char pattern(size_t i) { return (unsigned char)((i * 13 + i / 509) & 0xff); }

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char config[512];
    snprintf(config, sizeof config, "link=tun tun=tun0 netns=%s addr=192.0.2.2/24", argv[1]);
    ustack_t *st = ustack_stack_open(config);
    CHECK(st != NULL);
    struct sockaddr_in to = sin4("192.0.2.1", 7);
    int c = -1;
    /* socat may not listen yet: retry a refused connect for up to 10 s. */
    for (int i = 0; i < 100; i++) {
        c = ustack_socket(AF_INET, SOCK_STREAM, 0);
        CHECK(c >= 0);
        if (ustack_connect(c, SA(to), sizeof to) == 0) break;
        CHECK(errno == ECONNREFUSED);
        CHECK(ustack_close(c) == 0);
        c = -1;
        usleep(100000);
    }
    CHECK(c >= 0);
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    CHECK(ustack_getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
    CHECK(ti.tcpi_state == TCP_ESTABLISHED);
    /* Linux offers SACK, timestamps and window scaling. */
    CHECK((ti.tcpi_options & (TCPI_OPT_SACK | TCPI_OPT_TIMESTAMPS | TCPI_OPT_WSCALE)) ==
          (TCPI_OPT_SACK | TCPI_OPT_TIMESTAMPS | TCPI_OPT_WSCALE));

    static unsigned char out[TOTAL], in[TOTAL];
    for (size_t i = 0; i < TOTAL; i++) out[i] = pattern(i);
    /* socat's PIPE echoes through one pipe it both writes and reads, in one thread: with
     * more than the pipe's 64 KiB in it, socat blocks writing the pipe only it drains.
     * So no more than WINDOW bytes are ever out and not yet echoed. */
    const size_t WINDOW = 32 * 1024;
    size_t sent = 0, got = 0;
    while (got < TOTAL) {
        int may_send = sent < TOTAL && sent - got < WINDOW;
        if (may_send) {
            ssize_t w = ustack_send(c, out + sent, TOTAL - sent, MSG_DONTWAIT);
            CHECK(w > 0 || (w == -1 && errno == EAGAIN));
            if (w > 0) sent += (size_t)w;
        }
        ssize_t n = ustack_recv(c, in + got, TOTAL - got, may_send ? MSG_DONTWAIT : 0);
        CHECK(n > 0 || (n == -1 && errno == EAGAIN));
        if (n > 0) got += (size_t)n;
        if (n == -1 && may_send) {
            struct pollfd p = {.fd = c, .events = POLLIN | POLLOUT};
            CHECK(ustack_poll(&p, 1, 5000) == 1);
        }
    }
    for (size_t i = 0; i < TOTAL; i++) CHECK(in[i] == pattern(i));
    CHECK(ustack_close(c) == 0);
    CHECK(ustack_stack_close(st) == 0);
    printf("tun: %d bytes echoed by the kernel and checked\n", TOTAL);
    return 0;
}
