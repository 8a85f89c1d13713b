/*
 * files.c - opening and reading the files the library reads (datasets, token files, text,
 * Hugging Face configs): only regular files, never blocking on a FIFO, every failure a
 * DLT_ERR_IO naming the file and the system's cause (issue 20's hostile-path rules).
 */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *dlt__errno_text(int e, char *buf, size_t n) {
    if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "error %d", e);
    return buf;
}

dlt_status dlt__file_open_regular(const char *path, int optional, const char *F, int *fd_out,
                                  int64_t *size, int *absent) {
    char eb[128];
    if (absent) *absent = 0;
    /* O_NONBLOCK: opening a FIFO planted under a file name must not hang (it is refused
     * below as not a regular file; the flag changes nothing for regular files) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        /* absent means no directory entry at all: a dangling symlink under a file name is a
         * file that cannot be read, not a missing one (open says ENOENT for both) */
        struct stat lsb;
        const int dangling = e == ENOENT && lstat(path, &lsb) == 0;
        if (optional && e == ENOENT && !dangling && absent) {
            *absent = 1;
            return DLT_OK;
        }
        if (dangling)
            return dlt__err(DLT_ERR_IO, F, "cannot open %s: %s (it is a symlink to a missing file)", path,
                            dlt__errno_text(e, eb, sizeof eb));
        return dlt__err(DLT_ERR_IO, F, "cannot open %s: %s", path, dlt__errno_text(e, eb, sizeof eb));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return dlt__err(DLT_ERR_IO, F, "cannot read the size of %s: %s", path,
                        dlt__errno_text(e, eb, sizeof eb));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return dlt__err(DLT_ERR_IO, F, "%s is not a regular file", path);
    }
    *fd_out = fd;
    *size = (int64_t)sb.st_size;
    return DLT_OK;
}

dlt_status dlt__file_read_exact(int fd, void *buf, size_t n, const char *path, const char *what,
                                const char *F) {
    char eb[128];
    size_t done = 0;
    while (done < n) {
        ssize_t got = read(fd, (char *)buf + done, n - done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return dlt__err(DLT_ERR_IO, F, "%s: read failed in %s: %s", path, what,
                            dlt__errno_text(errno, eb, sizeof eb));
        if (got == 0)
            return dlt__err(DLT_ERR_IO, F, "%s: the file ended in %s (it shrank while being read)",
                            path, what);
        done += (size_t)got;
    }
    return DLT_OK;
}

dlt_status dlt__file_read_text(const char *path, int64_t max_bytes, const char *func, char **out, int64_t *len) {
    int fd = -1;
    int64_t size = 0;
    DLT_CHECK(dlt__file_open_regular(path, 0, func, &fd, &size, NULL));
    if (size > max_bytes) {
        close(fd);
        return dlt__err(DLT_ERR_FORMAT, func, "%s is %lld bytes, more than the %lld this reader takes", path,
                        (long long)size, (long long)max_bytes);
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return dlt__err(DLT_ERR_OUT_OF_MEMORY, func, "cannot allocate %lld bytes for %s", (long long)size + 1, path);
    }
    dlt_status st = dlt__file_read_exact(fd, buf, (size_t)size, path, "its contents", func);
    close(fd);
    if (st != DLT_OK) {
        free(buf);
        return st;
    }
    buf[size] = 0;
    *out = buf;
    if (len) *len = size;
    return DLT_OK;
}
