/*
 * launch.c - starts the processes of a data-parallel run on this machine, as torchrun's
 * --nproc-per-node does (the environment the library reads: docs/distributed.md), and
 * keeps the run from hanging: a process that fails takes the others down with it.
 *
 * Each copy runs in its own process group, so a terminal's Ctrl-C reaches it once (passed
 * on by the launcher) and SIGTERM/SIGKILL reach whatever it started too. The library's own
 * timeouts end the survivors' waits as well; the launcher only makes that immediate.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"

static volatile sig_atomic_t g_sig, g_alarm;

static void on_signal(int s) { g_sig = s; }
static void on_alarm(int s) {
    (void)s;
    g_alarm = 1;
}

/* A port nobody listens on now (the kernel's pick for port 0). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t l = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port ? port : 29500;
}

static void signal_all(const pid_t *pids, const int *done, int n, int sig) {
    for (int r = 0; r < n; r++)
        if (pids[r] > 0 && !done[r]) kill(-pids[r], sig);
}

int dlt_launch(const char *prog, int n, char *const argv[], const char *master_addr, int master_port,
               int grace_s) {
    if (n < 1 || !argv || !argv[0]) {
        fprintf(stderr, "%s: nothing to launch\n", prog);
        return 1;
    }
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int *done = calloc((size_t)n, sizeof *done);
    if (!pids || !done) {
        fprintf(stderr, "%s: out of memory\n", prog);
        free(pids);
        free(done);
        return 1;
    }
    if (master_port == 0) master_port = free_port();
    char port[16], world[16];
    snprintf(port, sizeof port, "%d", master_port);
    snprintf(world, sizeof world, "%d", n);

    struct sigaction sa, old_int, old_term, old_hup, old_alrm;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_signal; /* no SA_RESTART: waitpid returns to pass the signal on */
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, &old_alrm);
    g_sig = 0;
    g_alarm = 0;
    fflush(stdout);
    fflush(stderr);

    int status = 0, started = 0;
    for (int r = 0; r < n; r++) {
        pid_t p = fork();
        if (p < 0) {
            fprintf(stderr, "%s: cannot start rank %d: %s\n", prog, r, strerror(errno));
            status = 1;
            break;
        }
        if (p == 0) {
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            signal(SIGALRM, SIG_DFL);
            setpgid(0, 0);
            char rank[16];
            snprintf(rank, sizeof rank, "%d", r);
            setenv("RANK", rank, 1);
            setenv("LOCAL_RANK", rank, 1);
            setenv("WORLD_SIZE", world, 1);
            setenv("LOCAL_WORLD_SIZE", world, 1);
            setenv("MASTER_ADDR", master_addr ? master_addr : "127.0.0.1", 1);
            setenv("MASTER_PORT", port, 1);
            unsetenv("OMPI_COMM_WORLD_RANK"); /* one launcher's view of the job */
            unsetenv("OMPI_COMM_WORLD_SIZE");
            unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
            execvp(argv[0], argv);
            fprintf(stderr, "%s: cannot run %s: %s\n", prog, argv[0], strerror(errno));
            _exit(127);
        }
        setpgid(p, p); /* also here: no race with the first kill */
        pids[r] = p;
        started++;
    }
    if (status != 0) signal_all(pids, done, n, SIGKILL);

    int alive = started, failed_rank = -1;
    while (alive > 0) {
        int st = 0;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0) {
            if (errno != EINTR) break;
            if (g_sig) {
                signal_all(pids, done, n, (int)g_sig);
                g_sig = 0;
            }
            if (g_alarm) {
                fprintf(stderr, "%s: ranks still running %d s after the failure: killing them\n", prog, grace_s);
                signal_all(pids, done, n, SIGKILL);
                g_alarm = 0;
            }
            continue;
        }
        int r = 0;
        while (r < n && pids[r] != p) r++;
        if (r == n) continue;
        done[r] = 1;
        alive--;
        const int code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
        if (code != 0 && failed_rank < 0) {
            failed_rank = r;
            status = code;
            if (WIFSIGNALED(st))
                fprintf(stderr, "%s: rank %d (pid %d) was killed by signal %d", prog, r, (int)p, WTERMSIG(st));
            else
                fprintf(stderr, "%s: rank %d (pid %d) exited with status %d", prog, r, (int)p, code);
            fprintf(stderr, "%s\n", alive ? "; stopping the other ranks" : "");
            if (alive) {
                signal_all(pids, done, n, SIGTERM);
                alarm((unsigned)(grace_s > 0 ? grace_s : 1));
            }
        }
    }
    alarm(0);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    sigaction(SIGALRM, &old_alrm, NULL);
    free(pids);
    free(done);
    return status;
}

int dlt_launch_self(const char *prog, int n, int argc, char **argv) {
    char self[4096];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (k <= 0 || !args) {
        fprintf(stderr, "%s: cannot start the ranks (no /proc/self/exe?): use dltrain-run\n", prog);
        free(args);
        return 1;
    }
    self[k] = '\0';
    args[0] = self;
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    int rc = dlt_launch(prog, n, args, "127.0.0.1", 0, 5);
    free(args);
    return rc;
}
