/* A blocking write takes every byte, as Linux's tcp_sendmsg waits for send-buffer room:
 * write, writev and sendmsg of more than the send buffer (and more than one loop hand-off,
 * 256 KiB) return the whole count while the reader is slow; SO_SNDTIMEO ends a blocking
 * write with the count taken so far; a non-blocking one takes what fits, then EAGAIN.
 * Every byte is checked at the reader. Over a sim pair. */
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static unsigned char pattern(size_t i) { return (unsigned char)((i * 13 + i / 509) & 0xff); }

static int listener;
static volatile int go;
static size_t got;

/* Accepts, waits for `go`, then reads everything, checking each byte, to the end. */
static void *reader(void *arg) {
    (void)arg;
    int c = ustack_accept(listener, NULL, NULL);
    CHECK(c >= 0);
    while (!go) usleep(1000);
    static unsigned char buf[65536];
    for (;;) {
        ssize_t n = ustack_read(c, buf, sizeof buf);
        CHECK(n >= 0);
        if (n == 0) break;
        for (ssize_t i = 0; i < n; i++) CHECK(buf[i] == pattern(got + (size_t)i));
        got += (size_t)n;
    }
    CHECK(ustack_close(c) == 0);
    return NULL;
}

static void *start_late(void *arg) {
    (void)arg;
    usleep(200000);
    go = 1;
    return NULL;
}

#define BIG (8u << 20)
static unsigned char out[BIG];

int main(void) {
    pthread_t rt, lt;
    ustack_t *client;
    ustack_t *server = open_pair(&client);
    listener = listen_on(server, 9);
    CHECK(pthread_create(&rt, NULL, reader, NULL) == 0);
    for (size_t i = 0; i < BIG; i++) out[i] = pattern(i);
    int c = connect_to(client, "10.0.0.1", 9);
    int sndbuf = 0;
    socklen_t len = sizeof sndbuf;
    CHECK(ustack_getsockopt(c, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0);
    CHECK(sndbuf > 0 && sndbuf < (int)(BIG / 8));

    /* Nobody reads: SO_SNDTIMEO ends a blocking write with what was taken. */
    struct timeval tv = {0, 200000};
    CHECK(ustack_setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
    size_t sent = 0;
    ssize_t w = ustack_write(c, out, BIG);
    CHECK(w > 0 && (size_t)w < BIG);
    sent += (size_t)w;
    /* Non-blocking: what fits (the window may have opened a little since), then EAGAIN. */
    int on = 1;
    CHECK(ustack_ioctl(c, FIONBIO, &on) == 0);
    for (int i = 0;; i++) {
        CHECK(i < 1000);
        errno = 0;
        w = ustack_write(c, out + sent, BIG - sent);
        if (w < 0) break;
        CHECK(w > 0 && (size_t)w < BIG - sent);
        sent += (size_t)w;
        usleep(1000);
    }
    CHECK(errno == EAGAIN);
    on = 0;
    CHECK(ustack_ioctl(c, FIONBIO, &on) == 0);
    memset(&tv, 0, sizeof tv);
    CHECK(ustack_setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);

    /* What the sender and receiver buffer together is well under BIG. */
    CHECK(sent < BIG - 3500000);
    /* The reader starts 200 ms from now: each blocking call below waits for room and
     * returns its whole count. */
    CHECK(pthread_create(&lt, NULL, start_late, NULL) == 0);
    size_t n = 1500000;
    CHECK(ustack_write(c, out + sent, n) == (ssize_t)n);
    sent += n;
    CHECK(ustack_send(c, out + sent, 300000, 0) == 300000);
    sent += 300000;
    struct iovec iov[3] = {{out + sent, 100}, {out + sent + 100, 400000}, {out + sent + 400100, 300000}};
    CHECK(ustack_writev(c, iov, 3) == 700100);
    sent += 700100;
    struct iovec mv[2] = {{out + sent, 500000}, {out + sent + 500000, BIG - sent - 500000}};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = mv;
    m.msg_iovlen = 2;
    CHECK(ustack_sendmsg(c, &m, 0) == (ssize_t)(BIG - sent));
    sent = BIG;
    CHECK(ustack_shutdown(c, SHUT_WR) == 0);
    CHECK(pthread_join(rt, NULL) == 0);
    CHECK(pthread_join(lt, NULL) == 0);
    CHECK(got == BIG);
    CHECK(ustack_close(c) == 0);
    CHECK(ustack_close(listener) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("write: %u bytes, every blocking write whole, checked\n", BIG);
    return 0;
}
