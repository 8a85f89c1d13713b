/*
 * launch.h - starting the processes of a data-parallel run on this machine (dltrain-run,
 * and --gpus N of the training examples).
 */
#ifndef DLT_EXAMPLE_LAUNCH_H
#define DLT_EXAMPLE_LAUNCH_H

/* Runs n copies of argv (argv[0] is looked up on PATH unless it holds a '/') with RANK,
 * LOCAL_RANK (0..n-1), WORLD_SIZE, LOCAL_WORLD_SIZE (n), MASTER_ADDR and MASTER_PORT set,
 * each in its own process group. SIGINT, SIGTERM and SIGHUP are passed on to every copy.
 * When a copy fails (non-zero exit or a signal), the others get SIGTERM, then SIGKILL after
 * grace_s seconds. Returns the exit status of the first copy that failed (128 + the signal
 * for a signal), 0 when all succeeded, or 1 when nothing could be started. master_port 0:
 * a free port. Messages go to stderr prefixed with prog. */
int dlt_launch(const char *prog, int n, char *const argv[], const char *master_addr, int master_port,
               int grace_s);

/* --gpus N of a training example run without a launcher: n copies of this very program
 * (/proc/self/exe) with argv[1..argc-1], on 127.0.0.1 and a free port, 5 s grace; returns
 * dlt_launch's status (1 with a message when /proc/self/exe cannot be read). */
int dlt_launch_self(const char *prog, int n, int argc, char **argv);

#endif
