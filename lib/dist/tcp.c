/*
 * tcp.c - the CPU transport of the communicator: a rendezvous through rank 0 and a ring of
 * TCP connections, with ring collectives on host memory.
 *
 * Rendezvous (the torchrun model: everybody knows MASTER_ADDR:MASTER_PORT): rank 0 listens
 * there; every other rank opens its own listener on a free port, connects to rank 0
 * (retrying while rank 0 is not up yet) and says hello: rank, world size, its listener's
 * port, whether it wants NCCL. Rank 0 checks the hellos (one per rank, the same world
 * size and backend), then answers each with the table of addresses (the address each rank
 * connected from, and its port) and a payload (the NCCL unique id on CUDA), or with the
 * reason it refuses the job. Then each rank connects to its right neighbour (rank+1) and
 * accepts its left one (rank-1), and the listeners close.
 *
 * Collectives move data around the ring, each rank sending right and receiving from the
 * left at the same time (poll over both non-blocking sockets, so neither direction can
 * fill up and deadlock). All-reduce is a reduce-scatter then an all-gather over world
 * chunks: chunk c is summed along the ring in a fixed order and then copied to every rank,
 * so all ranks hold the same bits (replicas stay identical) and a run repeats exactly.
 *
 * Failure: a peer that dies closes its sockets (the kernel does it), so its neighbours'
 * reads end; a neighbour that fails aborts its own sockets in turn (comm.c), and the
 * failure travels around the ring in a few hops. Every wait has the communicator's
 * deadline. SIGPIPE is never raised (MSG_NOSIGNAL).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist_internal.h"

#define MAGIC 0x444c5444u /* "DLTD" */
#define PROTO_VERSION 1u
#define KIND_STORE 1u
#define KIND_RING 2u
#define HOST_CAP 64
#define MSG_CAP 384
#define SEGMENT ((size_t)1 << 20) /* broadcast pipelining */

struct dlt_tcp {
    int32_t rank, world;
    int64_t timeout_ms;
    int left, right;           /* ring sockets, -1 once closed */
    int32_t left_rank, right_rank;
    char left_name[96], right_name[96]; /* "rank 3 (10.0.0.2:41234)" for messages */
    void *tmp;                 /* scratch of the reductions */
    size_t tmp_n;
};

int64_t dlt__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int poll_ms(int64_t deadline) {
    int64_t ms = deadline - dlt__now_ms();
    if (ms < 0) ms = 0;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int set_socket_options(int fd) {
    int one = 1;
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    return 0;
}

/* "1.2.3.4" / "fe80::1" of a socket address (IPv4-mapped IPv6 as plain IPv4), and its port. */
static void addr_string(const struct sockaddr_storage *sa, char *host, size_t n, int32_t *port) {
    host[0] = '\0';
    *port = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, (socklen_t)n);
        *port = ntohs(a->sin_port);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
            inet_ntop(AF_INET, (const unsigned char *)&a->sin6_addr + 12, host, (socklen_t)n);
        else
            inet_ntop(AF_INET6, &a->sin6_addr, host, (socklen_t)n);
        *port = ntohs(a->sin6_port);
    }
}

/* A listener on port (0: any free one) on every interface: IPv6 with IPv4 mapped where the
 * kernel has IPv6, else IPv4. */
static dlt_status listen_on(int32_t port, const char *func, int *out_fd, int32_t *out_port) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    if (fd >= 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            int e = errno;
            close(fd);
            fd = -1;
            if (e == EADDRINUSE)
                return dlt__err(DLT_ERR_IO, func,
                                "cannot listen on port %d: it is in use (another job, or a rank 0 "
                                "still running?); choose another MASTER_PORT", port);
        }
    }
    if (fd < 0) { /* no IPv6 in this kernel: IPv4 */
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return dlt__err(DLT_ERR_IO, func, "socket(): %s", strerror(errno));
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            int e = errno;
            close(fd);
            return dlt__err(DLT_ERR_IO, func, "cannot listen on port %d: %s%s", port, strerror(e),
                            e == EADDRINUSE ? " (another job? choose another MASTER_PORT)" : "");
        }
    }
    if (listen(fd, 128) != 0 || set_socket_options(fd) != 0) {
        int e = errno;
        close(fd);
        return dlt__err(DLT_ERR_IO, func, "cannot listen on port %d: %s", port, strerror(e));
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[HOST_CAP];
    *out_port = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) addr_string(&ss, host, sizeof host, out_port);
    *out_fd = fd;
    return DLT_OK;
}

/* Connects to host:port, retrying refused attempts (the listener may not be up yet) until
 * the deadline. */
static dlt_status connect_retry(const char *host, int32_t port, int64_t deadline, const char *func,
                                const char *what, int *out_fd) {
    char ports[16];
    snprintf(ports, sizeof ports, "%d", (int)port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, ports, &hints, &res);
    if (gai != 0)
        return dlt__err(DLT_ERR_INVALID_ARGUMENT, func, "%s address '%s' does not resolve: %s", what,
                        host, gai_strerror(gai));
    int last_err = 0;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) {
                last_err = errno;
                continue;
            }
            if (set_socket_options(fd) != 0) {
                last_err = errno;
                close(fd);
                continue;
            }
            int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
            if (rc != 0 && errno == EINPROGRESS) {
                struct pollfd pf = {fd, POLLOUT, 0};
                int pr = poll(&pf, 1, poll_ms(deadline));
                int err = 0;
                socklen_t el = sizeof err;
                if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
                    rc = 0;
                else
                    errno = pr == 0 ? ETIMEDOUT : (err ? err : errno);
            }
            if (rc == 0) {
                freeaddrinfo(res);
                *out_fd = fd;
                return DLT_OK;
            }
            last_err = errno;
            close(fd);
        }
        if (dlt__now_ms() >= deadline) break;
        sleep_ms(50);
    }
    freeaddrinfo(res);
    return dlt__err(DLT_ERR_DIST_TIMEOUT, func,
                    "could not connect to %s at %s:%d before the timeout (last error: %s); is it "
                    "running, and are MASTER_ADDR/MASTER_PORT the same on every rank?",
                    what, host, (int)port, strerror(last_err));
}

/* Whole-buffer I/O on one socket with a deadline: 0, -1 end of file/reset, -2 timeout,
 * -3 another error (errno). */
static int io_all(int fd, void *buf, size_t n, int sending, int64_t deadline) {
    size_t done = 0;
    while (done < n) {
        struct pollfd pf = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
        if (dlt__now_ms() >= deadline) return -2;
        int pr = poll(&pf, 1, poll_ms(deadline));
        if (pr < 0 && errno != EINTR) return -3;
        if (pr <= 0) continue;
        ssize_t k = sending ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + done, n - done, 0);
        if (k > 0) {
            done += (size_t)k;
        } else if (k == 0 && !sending) {
            return -1;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return (errno == ECONNRESET || errno == EPIPE) ? -1 : -3;
        }
    }
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v) {
    uint32_t be = htonl(v);
    memcpy(p, &be, 4);
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t be;
    memcpy(&be, p, 4);
    return ntohl(be);
}

/* hello: magic, version, kind, rank, world, port, want_nccl, payload_n */
#define HELLO_BYTES 32
/* table header: magic, status, world, payload_n; then world x (host[64], port); then the
 * payload; or after a non-zero status, MSG_CAP bytes of message */
#define TABLE_HEAD 16
#define ENTRY_BYTES (HOST_CAP + 4)

typedef struct hello {
    uint32_t magic, version, kind;
    int32_t rank, world, port, want_nccl;
    uint32_t payload_n;
} hello;

static void hello_pack(const hello *h, unsigned char *b) {
    put_u32(b, h->magic);
    put_u32(b + 4, h->version);
    put_u32(b + 8, h->kind);
    put_u32(b + 12, (uint32_t)h->rank);
    put_u32(b + 16, (uint32_t)h->world);
    put_u32(b + 20, (uint32_t)h->port);
    put_u32(b + 24, (uint32_t)h->want_nccl);
    put_u32(b + 28, h->payload_n);
}
static void hello_unpack(const unsigned char *b, hello *h) {
    h->magic = get_u32(b);
    h->version = get_u32(b + 4);
    h->kind = get_u32(b + 8);
    h->rank = (int32_t)get_u32(b + 12);
    h->world = (int32_t)get_u32(b + 16);
    h->port = (int32_t)get_u32(b + 20);
    h->want_nccl = (int32_t)get_u32(b + 24);
    h->payload_n = get_u32(b + 28);
}

/* Accepts one connection on lfd before the deadline (-1 on timeout) and reads its hello. */
static int accept_hello(int lfd, int64_t deadline, hello *h, struct sockaddr_storage *peer) {
    for (;;) {
        struct pollfd pf = {lfd, POLLIN, 0};
        if (dlt__now_ms() >= deadline) return -1;
        int pr = poll(&pf, 1, poll_ms(deadline));
        if (pr <= 0) continue;
        socklen_t sl = sizeof *peer;
        int fd = accept(lfd, (struct sockaddr *)peer, &sl);
        if (fd < 0) continue;
        unsigned char b[HELLO_BYTES];
        if (set_socket_options(fd) != 0 || io_all(fd, b, sizeof b, 0, deadline) != 0) {
            close(fd);
            continue; /* a stray or dead connection: keep waiting for the real ones */
        }
        hello_unpack(b, h);
        if (h->magic != MAGIC || h->version != PROTO_VERSION) {
            close(fd);
            continue;
        }
        return fd;
    }
}

/* Rank 0's answer to one rank: the table, or a refusal with its reason. */
static void send_table(int fd, int32_t world, const char (*hosts)[HOST_CAP], const int32_t *ports,
                       const void *payload, size_t payload_n, const char *refusal, int64_t deadline) {
    size_t n = TABLE_HEAD + (refusal ? MSG_CAP : (size_t)world * ENTRY_BYTES + payload_n);
    unsigned char *b = calloc(1, n);
    if (!b) return;
    put_u32(b, MAGIC);
    put_u32(b + 4, refusal ? 1u : 0u);
    put_u32(b + 8, (uint32_t)world);
    put_u32(b + 12, (uint32_t)payload_n);
    if (refusal) {
        snprintf((char *)b + TABLE_HEAD, MSG_CAP, "%s", refusal);
    } else {
        for (int32_t r = 0; r < world; r++) {
            memcpy(b + TABLE_HEAD + (size_t)r * ENTRY_BYTES, hosts[r], HOST_CAP);
            put_u32(b + TABLE_HEAD + (size_t)r * ENTRY_BYTES + HOST_CAP, (uint32_t)ports[r]);
        }
        if (payload_n) memcpy(b + TABLE_HEAD + (size_t)world * ENTRY_BYTES, payload, payload_n);
    }
    (void)io_all(fd, b, n, 1, deadline);
    free(b);
}

/* Rank 0: collects one hello per rank on lfd, then answers everybody. */
static dlt_status rendezvous_root(const dlt_tcp_params *p, int lfd, int64_t deadline, const char *func,
                                  char (*hosts)[HOST_CAP], int32_t *ports) {
    const int32_t W = p->world;
    int *fds = malloc((size_t)W * sizeof *fds);
    if (!fds) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the rendezvous table");
    for (int32_t r = 0; r < W; r++) fds[r] = -1;
    char refusal[MSG_CAP] = "";
    int32_t joined = 1;
    dlt_status st = DLT_OK;
    while (joined < W) {
        hello h;
        struct sockaddr_storage peer;
        int fd = accept_hello(lfd, deadline, &h, &peer);
        if (fd < 0) {
            char missing[200] = "";
            size_t m = 0;
            for (int32_t r = 1; r < W && m + 12 < sizeof missing; r++)
                if (fds[r] < 0) m += (size_t)snprintf(missing + m, sizeof missing - m, "%s%d", m ? ", " : "", r);
            snprintf(refusal, sizeof refusal, "rank(s) %s did not join within %.1f s", missing,
                     (double)p->timeout_ms / 1000.0);
            st = dlt__err(DLT_ERR_DIST_TIMEOUT, func,
                          "%s (started? the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE=%d on every rank?)",
                          refusal, W);
            break;
        }
        if (h.kind != KIND_STORE) { /* a ring hello cannot come yet */
            close(fd);
            continue;
        }
        if (p->refuse)
            snprintf(refusal, sizeof refusal, "rank 0 cannot take part: %s", p->refuse);
        else if (h.want_nccl == 2)
            snprintf(refusal, sizeof refusal, "rank %d cannot use NCCL (its own message says why)", h.rank);
        else if (h.world != W)
            snprintf(refusal, sizeof refusal, "rank %d joined with world size %d, rank 0 has %d",
                     h.rank, h.world, W);
        else if (h.rank < 1 || h.rank >= W)
            snprintf(refusal, sizeof refusal, "a process joined as rank %d (world size %d)", h.rank, W);
        else if (fds[h.rank] >= 0)
            snprintf(refusal, sizeof refusal, "two processes joined as rank %d", h.rank);
        else if (h.want_nccl != p->want_nccl)
            snprintf(refusal, sizeof refusal,
                     "rank %d is on a %s context and rank 0 on a %s one: every rank must use the "
                     "same device type", h.rank, h.want_nccl ? "CUDA" : "CPU", p->want_nccl ? "CUDA" : "CPU");
        else if (h.payload_n != (uint32_t)p->payload_n)
            snprintf(refusal, sizeof refusal, "rank %d speaks another version of the rendezvous", h.rank);
        if (refusal[0]) {
            send_table(fd, W, NULL, NULL, NULL, 0, refusal, deadline);
            close(fd);
            st = dlt__err(DLT_ERR_DIST, func, "%s", refusal);
            break;
        }
        fds[h.rank] = fd;
        int32_t pport;
        addr_string(&peer, hosts[h.rank], HOST_CAP, &pport);
        ports[h.rank] = h.port;
        joined++;
    }
    for (int32_t r = 1; r < W; r++) {
        if (fds[r] < 0) continue;
        send_table(fds[r], W, (const char(*)[HOST_CAP])hosts, ports, p->payload, p->payload_n,
                   st == DLT_OK ? NULL : refusal, deadline);
        close(fds[r]);
    }
    free(fds);
    return st;
}

/* Ranks 1..: hello to rank 0, then its table (or refusal). */
static dlt_status rendezvous_member(const dlt_tcp_params *p, int32_t my_port, int64_t deadline,
                                    const char *func, char (*hosts)[HOST_CAP], int32_t *ports,
                                    void *payload_out) {
    int fd = -1;
    DLT_CHECK(connect_retry(p->master_addr, p->master_port, deadline, func, "rank 0 (MASTER_ADDR:MASTER_PORT)", &fd));
    hello h = {MAGIC, PROTO_VERSION, KIND_STORE, p->rank, p->world, my_port,
               p->refuse ? 2 : p->want_nccl, (uint32_t)p->payload_n};
    unsigned char b[HELLO_BYTES], head[TABLE_HEAD];
    hello_pack(&h, b);
    int rc = io_all(fd, b, sizeof b, 1, deadline);
    if (rc == 0) rc = io_all(fd, head, sizeof head, 0, deadline);
    dlt_status st = DLT_OK;
    if (rc != 0) {
        st = rc == -2 ? dlt__err(DLT_ERR_DIST_TIMEOUT, func,
                                 "rank 0 did not answer within %.1f s: are all %d ranks started?",
                                 (double)p->timeout_ms / 1000.0, p->world)
                      : dlt__err(DLT_ERR_DIST, func, "rank 0 closed the connection during the rendezvous");
    } else if (get_u32(head) != MAGIC) {
        st = dlt__err(DLT_ERR_DIST, func, "%s:%d is not a libdltrain rank 0", p->master_addr, p->master_port);
    } else if (get_u32(head + 4) != 0) {
        char msg[MSG_CAP + 1];
        memset(msg, 0, sizeof msg);
        rc = io_all(fd, msg, MSG_CAP, 0, deadline);
        st = dlt__err(DLT_ERR_DIST, func, "rank 0 refused the job: %s", rc == 0 ? msg : "(no reason received)");
    } else {
        size_t n = (size_t)p->world * ENTRY_BYTES;
        unsigned char *t = malloc(n ? n : 1);
        if (!t) {
            close(fd);
            return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the rendezvous table");
        }
        rc = io_all(fd, t, n, 0, deadline);
        if (rc == 0 && p->payload_n) rc = io_all(fd, payload_out, p->payload_n, 0, deadline);
        if (rc != 0) {
            st = dlt__err(DLT_ERR_DIST, func, "the table from rank 0 was cut short");
        } else {
            for (int32_t r = 0; r < p->world; r++) {
                memcpy(hosts[r], t + (size_t)r * ENTRY_BYTES, HOST_CAP);
                hosts[r][HOST_CAP - 1] = '\0';
                ports[r] = (int32_t)get_u32(t + (size_t)r * ENTRY_BYTES + HOST_CAP);
            }
        }
        free(t);
    }
    close(fd);
    return st;
}

/* Accepts the left neighbour's ring connection on lfd. */
static dlt_status accept_left(dlt_tcp *t, int lfd, int64_t deadline, const char *func) {
    for (;;) {
        hello h;
        struct sockaddr_storage peer;
        int fd = accept_hello(lfd, deadline, &h, &peer);
        if (fd < 0)
            return dlt__err(DLT_ERR_DIST_TIMEOUT, func,
                            "rank %d did not connect to this rank (%d) within the timeout: did it fail "
                            "during the rendezvous, or does a firewall block its connection?",
                            t->left_rank, t->rank);
        if (h.kind == KIND_RING && h.rank == t->left_rank) {
            char host[HOST_CAP];
            int32_t port;
            addr_string(&peer, host, sizeof host, &port);
            snprintf(t->left_name, sizeof t->left_name, "rank %d (%s)", h.rank, host);
            t->left = fd;
            return DLT_OK;
        }
        close(fd);
    }
}

dlt_status dlt__tcp_open(const dlt_tcp_params *p, void *payload_out, const char *func, dlt_tcp **out) {
    const int32_t W = p->world;
    dlt_tcp *t = calloc(1, sizeof *t);
    char (*hosts)[HOST_CAP] = calloc((size_t)W, HOST_CAP);
    int32_t *ports = calloc((size_t)W, sizeof *ports);
    int lfd = -1;
    dlt_status st = DLT_OK;
    if (!t || !hosts || !ports) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the transport");
        goto done;
    }
    t->rank = p->rank;
    t->world = W;
    t->timeout_ms = p->timeout_ms;
    t->left = t->right = -1;
    t->left_rank = (p->rank + W - 1) % W;
    t->right_rank = (p->rank + 1) % W;
    const int64_t deadline = dlt__now_ms() + p->timeout_ms;
    int32_t my_port = 0;
    DLT_CHECK_GOTO(st, listen_on(p->rank == 0 ? p->master_port : 0, func, &lfd, &my_port), done);
    if (p->rank == 0)
        DLT_CHECK_GOTO(st, rendezvous_root(p, lfd, deadline, func, hosts, ports), done);
    else
        DLT_CHECK_GOTO(st, rendezvous_member(p, my_port, deadline, func, hosts, ports, payload_out), done);
    /* the ring: connect right (the listeners' backlogs accept before anyone calls accept),
     * then take the connection from the left */
    const char *rhost = t->right_rank == 0 ? p->master_addr : hosts[t->right_rank];
    const int32_t rport = t->right_rank == 0 ? p->master_port : ports[t->right_rank];
    char what[32];
    snprintf(what, sizeof what, "rank %d", t->right_rank);
    DLT_CHECK_GOTO(st, connect_retry(rhost, rport, deadline, func, what, &t->right), done);
    snprintf(t->right_name, sizeof t->right_name, "rank %d (%s:%d)", t->right_rank, rhost, (int)rport);
    hello h = {MAGIC, PROTO_VERSION, KIND_RING, p->rank, W, 0, p->want_nccl, 0};
    unsigned char b[HELLO_BYTES];
    hello_pack(&h, b);
    if (io_all(t->right, b, sizeof b, 1, deadline) != 0) {
        st = dlt__err(DLT_ERR_DIST, func, "%s closed the ring connection at once", t->right_name);
        goto done;
    }
    DLT_CHECK_GOTO(st, accept_left(t, lfd, deadline, func), done);
done:
    close_fd(&lfd);
    free(hosts);
    free(ports);
    if (st != DLT_OK) {
        dlt__tcp_close(t);
        return st;
    }
    *out = t;
    return DLT_OK;
}

void dlt__tcp_abort(dlt_tcp *t) {
    if (!t) return;
    close_fd(&t->left);
    close_fd(&t->right);
}

void dlt__tcp_close(dlt_tcp *t) {
    if (!t) return;
    /* orderly: the peer reads everything sent, then end-of-file */
    if (t->right >= 0) shutdown(t->right, SHUT_WR);
    dlt__tcp_abort(t);
    free(t->tmp);
    free(t);
}

/* ---- the ring ---- */

static dlt_status peer_failed(dlt_tcp *t, int left, int rc, int err, const char *func) {
    const char *who = left ? t->left_name : t->right_name;
    if (rc == -2)
        return dlt__err(DLT_ERR_DIST_TIMEOUT, func,
                        "%s %s within %.1f s (the timeout: DLT_DIST_TIMEOUT or the options): it is "
                        "stuck, much slower, or waiting in another collective",
                        who, left ? "sent nothing" : "took nothing", (double)t->timeout_ms / 1000.0);
    if (rc == -1)
        return dlt__err(DLT_ERR_DIST, func,
                        "%s closed its connection: that process failed or exited (or its own "
                        "neighbour failed before it)", who);
    return dlt__err(DLT_ERR_DIST, func, "the connection to %s failed: %s", who, strerror(err));
}

/* Sends sn bytes right while receiving rn bytes from the left, both before the deadline. */
static dlt_status xfer(dlt_tcp *t, const void *sbuf, size_t sn, void *rbuf, size_t rn, int64_t deadline,
                       const char *func) {
    size_t so = 0, ro = 0;
    if (t->left < 0 || t->right < 0)
        return dlt__err(DLT_ERR_DIST, func, "the communicator's connections are closed (an earlier failure)");
    while (so < sn || ro < rn) {
        struct pollfd pf[2];
        int np = 0, is = -1, ir = -1;
        if (so < sn) {
            pf[np] = (struct pollfd){t->right, POLLOUT, 0};
            is = np++;
        }
        if (ro < rn) {
            pf[np] = (struct pollfd){t->left, POLLIN, 0};
            ir = np++;
        }
        if (dlt__now_ms() >= deadline) return peer_failed(t, ir >= 0, -2, 0, func);
        int pr = poll(pf, (nfds_t)np, poll_ms(deadline));
        if (pr < 0 && errno != EINTR) return dlt__err(DLT_ERR_DIST, func, "poll(): %s", strerror(errno));
        if (pr <= 0) continue;
        if (ir >= 0 && pf[ir].revents) {
            ssize_t k = recv(t->left, (char *)rbuf + ro, rn - ro, 0);
            if (k > 0)
                ro += (size_t)k;
            else if (k == 0)
                return peer_failed(t, 1, -1, 0, func);
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return peer_failed(t, 1, errno == ECONNRESET ? -1 : -3, errno, func);
        }
        if (is >= 0 && pf[is].revents) {
            ssize_t k = send(t->right, (const char *)sbuf + so, sn - so, MSG_NOSIGNAL);
            if (k >= 0)
                so += (size_t)k;
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return peer_failed(t, 0, (errno == ECONNRESET || errno == EPIPE) ? -1 : -3, errno, func);
        }
    }
    return DLT_OK;
}

static dlt_status tmp_reserve(dlt_tcp *t, size_t n, const char *func) {
    if (n <= t->tmp_n) return DLT_OK;
    void *p = realloc(t->tmp, n);
    if (!p) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes of transfer buffer", n);
    t->tmp = p;
    t->tmp_n = n;
    return DLT_OK;
}

/* Chunk i of count elements split in `world` nearly equal parts. */
static void chunk(size_t count, int32_t world, int32_t i, size_t *off, size_t *n) {
    const size_t q = count / (size_t)world, r = count % (size_t)world, ii = (size_t)i;
    *off = q * ii + (ii < r ? ii : r);
    *n = q + (ii < r ? 1 : 0);
}

static int32_t mod(int32_t a, int32_t w) { return ((a % w) + w) % w; }

/* Reduce-scatter over chunks (chunk c at offs[c], cnts[c] elements): afterwards this rank's
 * chunk `rank` of buf holds the reduction over every rank. */
static dlt_status ring_reduce_scatter(dlt_tcp *t, char *buf, const size_t *offs, const size_t *cnts,
                                      int32_t dtype, int32_t op, int64_t deadline, const char *func) {
    const int32_t W = t->world, r = t->rank;
    const size_t es = dlt__dtype_size(dtype);
    size_t maxn = 0;
    for (int32_t c = 0; c < W; c++) maxn = cnts[c] > maxn ? cnts[c] : maxn;
    DLT_CHECK(tmp_reserve(t, maxn * es, func));
    for (int32_t s = 0; s < W - 1; s++) {
        const int32_t si = mod(r - s - 1, W), ri = mod(r - s - 2, W);
        DLT_CHECK(xfer(t, buf + offs[si] * es, cnts[si] * es, t->tmp, cnts[ri] * es, deadline, func));
        dlt__reduce_into(buf + offs[ri] * es, t->tmp, cnts[ri], dtype, op);
    }
    return DLT_OK;
}

/* All-gather over byte chunks: chunk `rank` is this rank's; afterwards all are. */
static dlt_status ring_all_gather(dlt_tcp *t, char *buf, const size_t *offs, const size_t *lens,
                                  int64_t deadline, const char *func) {
    const int32_t W = t->world, r = t->rank;
    for (int32_t s = 0; s < W - 1; s++) {
        const int32_t si = mod(r - s, W), ri = mod(r - s - 1, W);
        DLT_CHECK(xfer(t, buf + offs[si], lens[si], buf + offs[ri], lens[ri], deadline, func));
    }
    return DLT_OK;
}

dlt_status dlt__tcp_all_reduce(dlt_tcp *t, void *buf, size_t count, int32_t dtype, int32_t op,
                               const char *func) {
    const int32_t W = t->world;
    const size_t es = dlt__dtype_size(dtype);
    size_t *offs = malloc(4 * (size_t)W * sizeof *offs);
    if (!offs) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the chunk table");
    size_t *cnts = offs + W, *boffs = offs + 2 * W, *blens = offs + 3 * W;
    for (int32_t c = 0; c < W; c++) {
        chunk(count, W, c, &offs[c], &cnts[c]);
        boffs[c] = offs[c] * es;
        blens[c] = cnts[c] * es;
    }
    const int64_t deadline = dlt__now_ms() + t->timeout_ms;
    dlt_status st = ring_reduce_scatter(t, buf, offs, cnts, dtype, op, deadline, func);
    if (st == DLT_OK) {
        dlt__reduce_finish((char *)buf + boffs[t->rank], cnts[t->rank], dtype, op, W);
        st = ring_all_gather(t, buf, boffs, blens, deadline, func);
    }
    free(offs);
    return st;
}

dlt_status dlt__tcp_reduce_scatter(dlt_tcp *t, const void *in, void *out, size_t count, int32_t dtype,
                                   int32_t op, const char *func) {
    const int32_t W = t->world;
    const size_t es = dlt__dtype_size(dtype), total = count * (size_t)W * es;
    char *work = malloc(total ? total : 1);
    size_t *offs = malloc(2 * (size_t)W * sizeof *offs);
    dlt_status st = DLT_OK;
    if (!work || !offs) {
        st = dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %zu bytes of reduce-scatter buffer", total);
        goto done;
    }
    memcpy(work, in, total);
    for (int32_t c = 0; c < W; c++) {
        offs[c] = (size_t)c * count;
        offs[W + c] = count;
    }
    st = ring_reduce_scatter(t, work, offs, offs + W, dtype, op, dlt__now_ms() + t->timeout_ms, func);
    if (st == DLT_OK) {
        dlt__reduce_finish(work + offs[t->rank] * es, count, dtype, op, W);
        memcpy(out, work + offs[t->rank] * es, count * es);
    }
done:
    free(work);
    free(offs);
    return st;
}

dlt_status dlt__tcp_all_gather(dlt_tcp *t, const void *in, void *out, size_t nbytes, const char *func) {
    const int32_t W = t->world;
    size_t *offs = malloc(2 * (size_t)W * sizeof *offs);
    if (!offs) return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate the chunk table");
    for (int32_t c = 0; c < W; c++) {
        offs[c] = (size_t)c * nbytes;
        offs[W + c] = nbytes;
    }
    memmove((char *)out + offs[t->rank], in, nbytes);
    dlt_status st = ring_all_gather(t, out, offs, offs + W, dlt__now_ms() + t->timeout_ms, func);
    free(offs);
    return st;
}

dlt_status dlt__tcp_broadcast(dlt_tcp *t, void *buf, size_t nbytes, int32_t root, const char *func) {
    /* a chain from root around the ring, in segments so that the ranks forward in parallel */
    const int64_t deadline = dlt__now_ms() + t->timeout_ms;
    const int recv = t->rank != root, send = t->right_rank != root;
    for (size_t off = 0; off < nbytes; off += SEGMENT) {
        const size_t n = nbytes - off < SEGMENT ? nbytes - off : SEGMENT;
        if (recv) DLT_CHECK(xfer(t, NULL, 0, (char *)buf + off, n, deadline, func));
        if (send) DLT_CHECK(xfer(t, (char *)buf + off, n, NULL, 0, deadline, func));
    }
    return DLT_OK;
}
