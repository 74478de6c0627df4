/* Thread safety: an edge-triggered epoll server on one thread (non-blocking accept and
 * echo until EAGAIN), and 8 client threads each opening 20 connections in turn, echoing
 * 4 KiB through each (every byte checked) and closing it: 160 connections, descriptors
 * created and closed from 9 threads at once. The clients close only once all 8 have their
 * echo (a barrier), so a server that blocked on one connection would stall them all. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>

#include "check.h"

#define THREADS 8
#define CONNS 20
#define SIZE 4096

static ustack_t *client;
static int listener, ep;
static volatile int stop;
static pthread_barrier_t all_echoed;

static void *serve(void *arg) {
    (void)arg;
    struct epoll_event evs[32];
    char buf[8192];
    while (!stop) {
        int n = ustack_epoll_wait(ep, evs, 32, 100);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            int fd = (int)evs[i].data.u64;
            if (fd == listener) {
                for (;;) {
                    int c = ustack_accept4(listener, NULL, NULL, SOCK_NONBLOCK);
                    if (c < 0) {
                        CHECK(errno == EAGAIN);
                        break;
                    }
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.u64 = (unsigned)c};
                    CHECK(ustack_epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
                }
                continue;
            }
            for (;;) {
                ssize_t r = ustack_read(fd, buf, sizeof buf);
                if (r > 0) {
                    /* The clients send 4 KiB and wait: the reply always fits. */
                    CHECK(ustack_write(fd, buf, (size_t)r) == r);
                    continue;
                }
                if (r == 0) {
                    CHECK(ustack_close(fd) == 0);
                    break;
                }
                CHECK(errno == EAGAIN || errno == ECONNRESET);
                if (errno == ECONNRESET) CHECK(ustack_close(fd) == 0);
                break;
            }
        }
    }
    return NULL;
}

static void *clients(void *arg) {
    int id = (int)(long)arg;
    unsigned char out[SIZE], in[SIZE];
    for (int k = 0; k < CONNS; k++) {
        for (int i = 0; i < SIZE; i++) out[i] = (unsigned char)(id * 31 + k * 7 + i);
        int c = ustack_socket_on(client, AF_INET, SOCK_STREAM, 0);
        CHECK(c >= 0);
        struct sockaddr_in to = sin4("10.0.0.1", 9000);
        CHECK(ustack_connect(c, SA(to), sizeof to) == 0);
        CHECK(ustack_write(c, out, SIZE) == SIZE);
        size_t got = 0;
        while (got < SIZE) {
            ssize_t r = ustack_read(c, in + got, SIZE - got);
            CHECK(r > 0);
            got += (size_t)r;
        }
        CHECK(memcmp(in, out, SIZE) == 0);
        int b = pthread_barrier_wait(&all_echoed);
        CHECK(b == 0 || b == PTHREAD_BARRIER_SERIAL_THREAD);
        CHECK(ustack_close(c) == 0);
    }
    return NULL;
}

int main(void) {
    ustack_t *server = open_pair(&client);
    listener = listen_on(server, 9000);
    CHECK(ustack_fcntl(listener, F_SETFL, O_NONBLOCK) == 0);
    ustack_stack_default(server);
    ep = ustack_epoll_create1(0);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = (unsigned)listener};
    CHECK(ustack_epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev) == 0);
    CHECK(pthread_barrier_init(&all_echoed, NULL, THREADS) == 0);
    pthread_t st, ct[THREADS];
    CHECK(pthread_create(&st, NULL, serve, NULL) == 0);
    for (long i = 0; i < THREADS; i++) CHECK(pthread_create(&ct[i], NULL, clients, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(ct[i], NULL) == 0);
    stop = 1;
    CHECK(pthread_join(st, NULL) == 0);
    CHECK(ustack_stack_close(server) == 0);
    printf("threads: %d connections echoed from %d threads\n", THREADS * CONNS, THREADS);
    return 0;
}
