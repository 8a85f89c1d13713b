"""Exceptions raised for failing libdltrain calls.

A failing call returns a dlt_status; its hundreds digit gives the kind (include/dltrain/core.h).
Every exception carries the library's code and message:

    DltError                 .code, .message, .status_string
      InvalidArgument        1xx  (also a ValueError)  the caller passed something wrong
      NotSupported           2xx  this build or machine cannot do it
        NoDevice             201  no CUDA device, driver, or CUDA support in this build
      OutOfMemory            3xx  (also a MemoryError)  host or device memory
      DeviceError            4xx  CUDA/cuBLAS/cuDNN failure, poisoned context
      IOFormatError          5xx  a file could not be read/written, or is malformed
      DistError              6xx  another process of a communicator failed, left or timed out
      InternalError          9xx  a bug in libdltrain (please report the message)

Raised by the binding itself, before any C call:
    ConcurrentUseError       (a RuntimeError) a context used from two threads at once
    OverflowError            an integer outside its C parameter's range (shapes, seeds, ...)
"""

# Status codes (include/dltrain/core.h). Append only, never renumbered.
OK = 0
ERR_INVALID_ARGUMENT = 100
ERR_NULL_POINTER = 101
ERR_SHAPE = 102
ERR_DTYPE = 103
ERR_CONTEXT_MISMATCH = 104
ERR_INVALID_STATE = 105
ERR_VERSION = 106
ERR_NOT_SUPPORTED = 200
ERR_NO_DEVICE = 201
ERR_OUT_OF_MEMORY = 300
ERR_DEVICE_OUT_OF_MEMORY = 301
ERR_CUDA = 400
ERR_CUBLAS = 401
ERR_CUDNN = 402
ERR_CONTEXT_POISONED = 403
ERR_NCCL = 404
ERR_IO = 500
ERR_FORMAT = 501
ERR_DIST = 600
ERR_DIST_TIMEOUT = 601
ERR_INTERNAL = 900


class DltError(Exception):
    """A libdltrain call failed. .code is the dlt_status, .message the library's message."""

    def __init__(self, code, message, status_string=""):
        self.code = int(code)
        self.message = message
        self.status_string = status_string
        super().__init__(code, message)

    def __str__(self):
        what = self.message or self.status_string or "libdltrain error"
        return "%s [status %d%s]" % (what, self.code,
                                     ", " + self.status_string if self.status_string else "")

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.status_string))


class InvalidArgument(DltError, ValueError):
    """1xx: a value out of range, a NULL/None handle, wrong shapes or dtypes, misuse."""


class NotSupported(DltError):
    """2xx: a valid request that this build or machine cannot do."""


class NoDevice(NotSupported):
    """201: no CUDA device, no driver, or no CUDA support in this build."""


class OutOfMemory(DltError, MemoryError):
    """3xx: host (300) or device (301) allocation failed."""


class DeviceError(DltError):
    """4xx: the CUDA runtime or a vendor library failed, or the context is poisoned."""


class IOFormatError(DltError):
    """5xx: open/read/write failed (500) or a file is malformed (501)."""


class DistError(DltError):
    """6xx: a peer process of a communicator failed or disagreed (600), or did not answer
    within the timeout (601)."""


class InternalError(DltError):
    """9xx: a bug in libdltrain."""


_BY_KIND = {1: InvalidArgument, 2: NotSupported, 3: OutOfMemory, 4: DeviceError,
            5: IOFormatError, 6: DistError, 9: InternalError}
_BY_CODE = {ERR_NO_DEVICE: NoDevice}


def error_class(code):
    """The exception class for a status code (DltError for an unknown kind)."""
    return _BY_CODE.get(code) or _BY_KIND.get(code // 100, DltError)


def from_status(code, message, status_string=""):
    return error_class(code)(code, message, status_string)


class ConcurrentUseError(RuntimeError):
    """A context (or an object made from it) was used by a thread while another thread was
    inside a libdltrain call on the same context. A context and everything made from it
    belongs to one thread at a time; the binding refuses the second call instead of letting
    the library corrupt its state. Give each thread its own Context."""
