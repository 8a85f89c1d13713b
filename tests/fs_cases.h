/*
 * fs_cases.h - hostile file-system cases for the file readers' tests (test_records,
 * test_tokens): a symlink loop, a dangling symlink, and a call made without privileges so
 * that "permission denied" is observable when the tests run as root (CI containers do).
 * Small local helpers; harness.h may grow shared ones (engineer "harden").
 */
#ifndef DLT_TEST_FS_CASES_H
#define DLT_TEST_FS_CASES_H

#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Two links a -> b -> a under dir; *a_out names the one to open (ELOOP). 0 on success. */
static __attribute__((unused)) int fs_symlink_loop(const char *dir, const char *name, char *a_out,
                                                   size_t n) {
    char b[512];
    snprintf(a_out, n, "%s/%s", dir, name);
    snprintf(b, sizeof b, "%s/%s.other", dir, name);
    return symlink(b, a_out) == 0 && symlink(a_out, b) == 0 ? 0 : -1;
}

/* A link under dir to a target that does not exist (ENOENT on open). 0 on success. */
static __attribute__((unused)) int fs_dangling_link(const char *dir, const char *name, char *out,
                                                    size_t n) {
    snprintf(out, n, "%s/%s", dir, name);
    return symlink("no-such-target-of-this-link", out) == 0 ? 0 : -1;
}

/* Runs fn(arg) without root's right to read anything: directly when not root, else in a
 * child that switched to the "nobody" ids (65534). Returns fn's result (0 = the check
 * passed), or -1 when the child could not run. The file fn opens should be mode 0 and its
 * directory searchable (chmod 0755). */
static __attribute__((unused)) int fs_unprivileged(int (*fn)(void *), void *arg) {
    if (geteuid() != 0) return fn(arg);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
        int r = fn(arg);
        fflush(stdout);
        _exit(r == 0 ? 0 : 1);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status) == 0 ? 0 : WEXITSTATUS(status) == 3 ? -1 : 1;
}

#endif
