/* Checks for the C API's tests: a failed check prints where, errno and ustack_errmsg(),
 * and exits 1. */
#ifndef CHECK_H
#define CHECK_H
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ustack.h"

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d %s; %s)\n", __FILE__, \
                    __LINE__, #cond, errno, strerror(errno), ustack_errmsg());       \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* `call` fails with -1 and errno `want`. */
#define CHECK_ERR(call, want)                                                         \
    do {                                                                              \
        errno = 0;                                                                    \
        long r_ = (long)(call);                                                       \
        if (r_ != -1 || errno != (want)) {                                            \
            fprintf(stderr, "%s:%d: %s gave %ld errno %d (%s), want -1 errno %d (%s)\n", \
                    __FILE__, __LINE__, #call, r_, errno, strerror(errno), (want),    \
                    strerror(want));                                                  \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static inline struct sockaddr_in sin4(const char *ip, int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

#define SA(a) ((struct sockaddr *)&(a))

/* A sim pair: the server stack at 10.0.0.1, the client stack at 10.0.0.2. */
static inline ustack_t *open_pair(ustack_t **client) {
    ustack_t *s = ustack_stack_open("link=sim addr=10.0.0.1/24 peer=10.0.0.2/24");
    CHECK(s != NULL);
    *client = ustack_stack_peer(s);
    CHECK(*client != NULL);
    return s;
}

/* A listener on the server stack's port `port`. */
static inline int listen_on(ustack_t *s, int port) {
    int l = ustack_socket_on(s, AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = sin4("10.0.0.1", port);
    CHECK(ustack_bind(l, SA(a), sizeof a) == 0);
    CHECK(ustack_listen(l, 16) == 0);
    return l;
}

/* A TCP connection from stack `s` to `ip`:`port` (blocking connect). */
static inline int connect_to(ustack_t *s, const char *ip, int port) {
    int c = ustack_socket_on(s, AF_INET, SOCK_STREAM, 0);
    CHECK(c >= 0);
    struct sockaddr_in to = sin4(ip, port);
    CHECK(ustack_connect(c, SA(to), sizeof to) == 0);
    return c;
}
#endif
