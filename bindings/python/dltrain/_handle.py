"""Ownership of library handles by Python objects.

Every wrapper holds one C handle. Two kinds:
  - owned: created for Python (dlt_X_create, an op result); released with its destroy or
    release function when the object is closed or collected;
  - borrowed: handed out by an owner (a module's parameter, a loader's batch, a gradient);
    never released by Python. It keeps its owner alive through a Python reference.

Order: an owned handle may need other handles to stay valid until it is released (a tensor
its context, a loader its dataset). The wrapper keeps those owners in `_deps` (so plain
reference counting already destroys it first) and registers itself with them as a live
child. An owner whose children are still alive does not destroy its handle when closed or
finalised: it marks itself closing and the last child's release destroys it. This keeps the
order right even where the garbage collector finalises a reference cycle in arbitrary order
or a program closes a context before its tensors.

Threads: the handle is stored as a _guard.HandleInt carrying the guard of its context
(given, or found among the deps), so every C call on it is refused while another thread is
inside a call on the same context (see _guard.py).
"""

from ._guard import handle_int, guard_of


class Handle:
    __slots__ = ("_ptr", "_deps", "_counted", "_children", "_closing", "_owned", "_why",
                 "__weakref__")

    #: destroy/release function of owned handles (a staticmethod in subclasses)
    _destroy = None
    #: noun for messages
    _what = "object"

    def __init__(self, ptr, deps=(), owned=True, guard=None):
        self._deps = tuple(d for d in deps if d is not None)
        if guard is None:
            for d in self._deps:
                guard = guard_of(d)
                if guard is not None:
                    break
        self._ptr = handle_int(ptr, guard) if ptr else None
        self._children = 0
        self._closing = False
        self._why = None
        self._owned = bool(owned and self._ptr)
        counted = ()
        if self._owned:
            counted = tuple(d for d in self._deps if isinstance(d, Handle) and d._owned)
            for d in counted:
                d._children += 1
        self._counted = counted

    # ---- access -----------------------------------------------------------------------
    @property
    def handle(self):
        """The C handle as an int (raises ValueError once closed)."""
        p = self._ptr
        if p is None or self._closing:
            raise ValueError("this %s has been closed%s"
                             % (self._what, " (%s)" % self._why if self._why else ""))
        return p

    @property
    def closed(self):
        return self._ptr is None or self._closing

    # ---- release ----------------------------------------------------------------------
    def close(self):
        """Releases the handle now (or, while objects made from it are alive, as soon as the
        last of them is released). Using the object afterwards raises ValueError."""
        if self._ptr is None:
            return
        if self._children > 0:
            self._closing = True
            return
        self._free()

    def _free(self):
        ptr, self._ptr = self._ptr, None
        counted, self._counted = self._counted, ()
        if ptr is not None and self._owned:
            self._destroy(ptr)
        for d in counted:
            d._child_gone()

    def _child_gone(self):
        self._children -= 1
        if self._children <= 0 and self._closing and self._ptr is not None:
            self._free()

    def _disown(self, new_owner):
        """The handle now belongs to new_owner (a container): never released by Python
        again; the object keeps new_owner alive."""
        counted, self._counted = self._counted, ()
        self._owned = False
        self._deps = self._deps + (new_owner,)
        for d in counted:
            d._child_gone()

    def _invalidate(self, why=None):
        """A borrowed handle that its owner no longer guarantees: forget it (using the
        object afterwards raises ValueError, with `why` in the message)."""
        if not self._owned:
            self._ptr = None
            self._why = why

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown, missing symbol: nothing sensible to do
            pass


def arg(obj, cls, name, optional=False):
    """The handle of obj for a C argument: None -> NULL (the library reports a required
    NULL argument itself); a wrapper of the wrong type -> TypeError."""
    if obj is None:
        return None
    if not isinstance(obj, cls):
        raise TypeError("argument '%s' must be a %s%s, got %s"
                        % (name, cls.__name__, " or None" if optional else "",
                           type(obj).__name__))
    return obj.handle
