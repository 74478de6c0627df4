/* dup, dup2, dup3, F_DUPFD: two descriptors, one socket. Data goes through either; the
 * socket closes (the peer reads its FIN) only with its last descriptor; O_NONBLOCK is
 * shared, FD_CLOEXEC each descriptor's own; dup2 onto a kernel pipe or another ustack
 * socket closes what was there. Over a sim pair. */
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "check.h"

/* The peer `s` reads exactly `want` (blocking). */
static void expect(int s, const char *want) {
    char b[16];
    size_t n = strlen(want), got = 0;
    while (got < n) {
        ssize_t r = ustack_read(s, b + got, n - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
    CHECK(memcmp(b, want, n) == 0);
}

/* The peer `s` has nothing to read and no FIN. */
static void open_and_quiet(int s) {
    char b[4];
    usleep(50000);
    CHECK_ERR(ustack_recv(s, b, sizeof b, MSG_DONTWAIT), EAGAIN);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    ustack_t *client;
    ustack_t *server = open_pair(&client);
    int l = listen_on(server, 11);
    int c1 = connect_to(client, "10.0.0.1", 11);
    int s1 = ustack_accept(l, NULL, NULL);
    int c2 = connect_to(client, "10.0.0.1", 11);
    int s2 = ustack_accept(l, NULL, NULL);
    CHECK(s1 >= 0 && s2 >= 0);

    CHECK(ustack_fcntl(c1, F_SETFD, FD_CLOEXEC) == 0);
    int d = ustack_dup(c1);
    CHECK(d >= 0 && d != c1);
    CHECK(ustack_fcntl(d, F_GETFD, 0) == 0);
    CHECK(ustack_fcntl(c1, F_GETFD, 0) == FD_CLOEXEC);
    CHECK(ustack_write(d, "ab", 2) == 2);
    expect(s1, "ab");
    /* O_NONBLOCK is the socket's: set on one descriptor, seen on the other. */
    int on = 1;
    CHECK(ustack_ioctl(d, FIONBIO, &on) == 0);
    CHECK(ustack_fcntl(c1, F_GETFL, 0) & O_NONBLOCK);
    on = 0;
    CHECK(ustack_ioctl(c1, FIONBIO, &on) == 0);
    CHECK(!(ustack_fcntl(d, F_GETFL, 0) & O_NONBLOCK));

    /* Closing one descriptor keeps the socket open. */
    CHECK(ustack_close(c1) == 0);
    CHECK_ERR(ustack_write(c1, "x", 1), EBADF);
    open_and_quiet(s1);
    CHECK(ustack_write(s1, "cd", 2) == 2);
    expect(d, "cd");

    int k = ustack_fcntl(d, F_DUPFD, 100);
    CHECK(k >= 100 && ustack_fcntl(k, F_GETFD, 0) == 0);
    int kc = ustack_fcntl(d, F_DUPFD_CLOEXEC, 0);
    CHECK(kc >= 0 && ustack_fcntl(kc, F_GETFD, 0) == FD_CLOEXEC);

    /* dup2 onto a kernel pipe's read end: the kernel closes it (its writer gets EPIPE);
     * the number is the socket's now. */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(ustack_dup2(d, p[0]) == p[0]);
    errno = 0;
    CHECK(write(p[1], "x", 1) == -1 && errno == EPIPE);
    CHECK(ustack_write(p[0], "ef", 2) == 2);
    expect(s1, "ef");
    CHECK(close(p[1]) == 0);

    /* dup3 onto another ustack socket closes it (its peer reads the FIN). */
    CHECK(ustack_dup3(d, c2, O_CLOEXEC) == c2);
    char b[4];
    CHECK(ustack_read(s2, b, sizeof b) == 0);
    CHECK(ustack_fcntl(c2, F_GETFD, 0) == FD_CLOEXEC);
    CHECK(ustack_write(c2, "gh", 2) == 2);
    expect(s1, "gh");

    CHECK(ustack_dup2(d, d) == d);
    CHECK_ERR(ustack_dup3(d, d, 0), EINVAL);
    CHECK_ERR(ustack_dup3(d, 300, 12345), EINVAL);
    CHECK_ERR(ustack_dup(-5), EBADF);
    CHECK_ERR(ustack_dup2(d, -1), EBADF);
    CHECK_ERR(ustack_dup2(1000, 300), EBADF); /* not a ustack descriptor */

    /* The socket closes with its last descriptor: d, k, kc, p[0], c2. */
    int last[] = {d, k, kc, p[0]};
    for (int i = 0; i < 4; i++) {
        CHECK(ustack_close(last[i]) == 0);
        open_and_quiet(s1);
    }
    CHECK(ustack_close(c2) == 0);
    CHECK(ustack_read(s1, b, sizeof b) == 0);

    CHECK(ustack_close(s1) == 0 && ustack_close(s2) == 0 && ustack_close(l) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("dup: one socket, many descriptors, checked\n");
    return 0;
}
