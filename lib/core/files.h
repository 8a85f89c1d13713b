/*
 * files.h - opening and reading input files by issue 20's rules: regular files only (a FIFO,
 * directory or device under a file name is refused without blocking), a dangling symlink is
 * a file that cannot be read (never "absent"), every failure DLT_ERR_IO naming the file and
 * the system's cause.
 */
#ifndef DLT_CORE_FILES_H
#define DLT_CORE_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* strerror_r into buf. */
const char *dlt__errno_text(int e, char *buf, size_t n);
/* Opens path read-only if it is a regular file (FIFOs, directories and devices are refused
 * without blocking); *fd_out and *size on success. With optional = 1 (and absent given) a
 * missing file sets *absent and succeeds. Messages name the file and the system's cause
 * (a symlink loop, permission denied, a dangling link: "No such file or directory"). */
dlt_status dlt__file_open_regular(const char *path, int optional, const char *func, int *fd_out,
                                  int64_t *size, int *absent);
/* Reads exactly n bytes (EINTR retried); a short file is DLT_ERR_IO naming path and what. */
dlt_status dlt__file_read_exact(int fd, void *buf, size_t n, const char *path, const char *what,
                                const char *func);
/* A whole text file (at most max_bytes) into a malloc'd NUL-terminated buffer (*len bytes
 * without the NUL; len may be NULL). A larger file is DLT_ERR_FORMAT. */
dlt_status dlt__file_read_text(const char *path, int64_t max_bytes, const char *func, char **out, int64_t *len);

#endif
