"""nn.Module and nn.Parameter: PyTorch's module protocol over two kinds of modules.

    class MLP(dltrain.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = dltrain.nn.Linear(4, 8)          # a libdltrain layer as a child
            self.scale = dltrain.nn.Parameter(dltrain.ones(8))
            self.register_buffer("calls", dltrain.zeros(()))
        def forward(self, x):
            return self.fc1(x).relu() * self.scale

A *Python module* (a subclass like MLP) keeps what is assigned to it as PyTorch does:
Parameters in _parameters, buffers in _buffers (register_buffer), modules in _modules; its
forward is Python. A *libdltrain module* (Linear, Conv2d, ResNet, a Sequential of them, ...)
wraps a dlt_module handle (`_h`): its state and forward are the library's, and its state
names are the library's (PyTorch's). Both answer the same protocol: parameters(),
named_parameters(), buffers(), state_dict(), load_state_dict(), train(), eval(), to(),
zero_grad(), __call__ -> forward, children(), modules(), apply(), repr and summary(), so they
nest freely and feed the optimizers.

Tensors handed out (parameters, buffers, state_dict values) hold references of their own:
they stay valid when the module is closed. A libdltrain module used after close() raises
ValueError; so does a child of a closed libdltrain Sequential.
"""

import collections
import ctypes

from . import dtypes as _dt
from . import errors
from ._handle import Handle, arg
from ._lib import lib, check, enc
from ._tensor import Tensor, parse_to_args, _target_context


class Parameter(Tensor):
    """nn.Parameter(data, requires_grad=True): a leaf tensor that a Module registers when
    it is assigned as an attribute. It shares data's memory (as PyTorch's does)."""

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            from ._factories import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError("Parameter(data): data must be a dltrain.Tensor, got %s"
                            % type(data).__name__)
        d = data.detach()  # same memory, no history
        p = cls._retain(int(d.handle), d.ctx)
        d.close()
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, *args, **kwargs):
        pass

    def __repr__(self):
        if self.closed:
            return "<dltrain.nn.Parameter released>"
        return "Parameter containing:\n" + Tensor.__repr__(self)


class _ModuleHandle(Handle):
    """A dlt_module handle. A container's handle lists the handles of its children: the
    container's destroy frees them, so they are invalidated with it."""

    __slots__ = ("_members",)
    _destroy = staticmethod(lib.dlt_module_destroy)
    _what = "module"

    def __init__(self, ptr, ctx):
        Handle.__init__(self, ptr, (ctx,))
        self._members = []

    def _adopt(self, child):
        """child (a _ModuleHandle) now belongs to this container (dlt_sequential_append)."""
        child._disown(self)
        self._members.append(child)

    def _free(self):
        members, self._members = self._members, []
        Handle._free(self)
        for m in members:
            m._invalidated_by_container()

    def _invalidated_by_container(self):
        members, self._members = self._members, []
        self._invalidate("it belonged to a Sequential that was closed")
        for m in members:
            m._invalidated_by_container()


def _is_c(m):
    return m.__dict__.get("_h") is not None


class Module:
    """Base class of every module (PyTorch's nn.Module). Subclass it, call
    super().__init__() first, assign Parameters, buffers and modules as attributes and
    define forward()."""

    _version = 1

    def __init__(self):
        d = self.__dict__
        d["_parameters"] = collections.OrderedDict()
        d["_buffers"] = collections.OrderedDict()
        d["_non_persistent"] = set()
        d["_modules"] = collections.OrderedDict()
        d.setdefault("_h", None)
        d["_training"] = True

    def _attach(self, ptr, ctx, ctor=None):
        """Makes this a libdltrain module: ptr (an owned dlt_module) on ctx; ctor is
        (C create function, its arguments after ctx), used to rebuild it on another
        context by to()."""
        d = self.__dict__
        d["_h"] = _ModuleHandle(ptr, ctx)
        d["ctx"] = ctx
        d["_ctor"] = ctor

    # ---- attribute protocol (registration by assignment) -----------------------------
    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, d, "_buffers", "_modules")
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError("cannot assign '%s' as parameter '%s' (dltrain.nn.Parameter or "
                                "None expected)" % (type(value).__name__, name))
            params[name] = None
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, d, "_parameters", "_buffers")
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError("cannot assign '%s' as child module '%s' (dltrain.nn.Module or "
                                "None expected)" % (type(value).__name__, name))
            modules[name] = None
            return
        buffers = d.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError("cannot assign '%s' as buffer '%s' (dltrain.Tensor or None "
                                "expected)" % (type(value).__name__, name))
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name, d, *dicts):
        d.pop(name, None)
        for k in dicts:
            if name in d[k]:
                del d[k][name]

    def __getattr__(self, name):
        d = self.__dict__
        for k in ("_parameters", "_buffers", "_modules"):
            if k in d and name in d[k]:
                return d[k][name]
        if d.get("_h") is not None and not name.startswith("_"):
            try:  # a libdltrain module's state entry: lin.weight, bn.running_mean
                return self.find(name)
            except errors.DltError:
                pass
        raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))

    def __delattr__(self, name):
        d = self.__dict__
        for k in ("_parameters", "_buffers", "_modules"):
            if k in d and name in d[k]:
                del d[k][name]
                d["_non_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        d = self.__dict__
        keys = list(object.__dir__(self))
        for k in ("_parameters", "_buffers", "_modules"):
            keys += list(d.get(k, {}))
        return sorted(set(k for k in keys if not k[0].isdigit()))

    def _check_name(self, name, what):
        if not isinstance(name, str):
            raise TypeError("%s name should be a string, got %s" % (what, type(name).__name__))
        if not name or "." in name:
            raise KeyError("%s name can't be empty or contain \".\", got %r" % (what, name))

    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError("cannot assign '%s' object to parameter '%s' (dltrain.nn.Parameter "
                            "or None required)" % (type(param).__name__, name))
        if _is_c(self):
            raise TypeError("%s is a libdltrain module: its parameters are the library's "
                            "(wrap it in a Python Module to add your own)" % type(self).__name__)
        self.__dict__.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor that is state but not a parameter (in state_dict() unless persistent is
        False; moved by to())."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError("cannot assign '%s' object to buffer '%s' (dltrain.Tensor or None "
                            "required)" % (type(tensor).__name__, name))
        if _is_c(self):
            raise TypeError("%s is a libdltrain module: its buffers are the library's"
                            % type(self).__name__)
        self._remove_from(name, self.__dict__, "_parameters", "_modules")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError("%s is not a dltrain.nn.Module" % type(module).__name__)
        self._check_name(name, "module")
        if module is None:
            self._modules[name] = None
        else:
            setattr(self, name, module)

    register_module = add_module

    # ---- the libdltrain handle -------------------------------------------------------------
    @property
    def handle(self):
        """The dlt_module handle (libdltrain modules only)."""
        h = self.__dict__.get("_h")
        if h is None:
            raise TypeError("%s is a Python module: it has no libdltrain handle (functions "
                            "that need a dlt_module take the library's layers, e.g. a "
                            "Sequential of them)" % type(self).__name__)
        return h.handle

    @property
    def is_native(self):
        """True for a libdltrain module (a dlt_module handle), False for a Python module."""
        return _is_c(self)

    @property
    def closed(self):
        h = self.__dict__.get("_h")
        return h.closed if h is not None else False

    def close(self):
        """Frees a libdltrain module now (its children with it); a Python module closes its
        children. Tensors taken from it stay valid."""
        h = self.__dict__.get("_h")
        if h is not None:
            h.close()
            return
        for m in self._modules.values():
            if m is not None:
                m.close()

    # ---- running ---------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        if _is_c(self):
            if len(args) != 1 or kwargs:
                raise TypeError("%s.forward takes one tensor" % type(self).__name__)
            out = ctypes.c_void_p()
            check(lib.dlt_module_forward(self.handle, arg(args[0], Tensor, "x"),
                                         ctypes.byref(out)))
            return Tensor._wrap(out.value, self.ctx)
        raise NotImplementedError("Module [%s] is missing the required \"forward\" function"
                                  % type(self).__name__)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    @property
    def training(self):
        if _is_c(self):
            return bool(lib.dlt_module_is_training(self.handle))
        return self.__dict__.get("_training", True)

    @training.setter
    def training(self, mode):
        if _is_c(self):
            check(lib.dlt_module_set_training(self.handle, 1 if mode else 0))
        else:
            self.__dict__["_training"] = bool(mode)

    def train(self, mode=True):
        """Training (True) or evaluation (False) mode, recursively. Returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        if not _is_c(self):
            for m in self._modules.values():
                if m is not None:
                    m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        from .autograd import zero_grad
        zero_grad(self.parameters(), set_to_none)

    @property
    def kind(self):
        """The library's kind name ("linear", "resnet", ...); None for a Python module."""
        if not _is_c(self):
            return None
        k = lib.dlt_module_kind(self.handle)
        return k.decode() if k else None

    # ---- state -----------------------------------------------------------------------------
    def num_state(self):
        if _is_c(self):
            return int(lib.dlt_module_num_state(self.handle))
        return len(list(self._state(True, True, True)))

    def state_entry(self, i):
        """(name, tensor, is_param) of state entry i, in registration order."""
        if not _is_c(self):
            return list(self._state(True, True, True))[i]
        name = ctypes.c_char_p()
        t = ctypes.c_void_p()
        isp = ctypes.c_int32()
        check(lib.dlt_module_state_entry(self.handle, int(i), ctypes.byref(name),
                                         ctypes.byref(t), ctypes.byref(isp)))
        cls = Parameter if isp.value else Tensor
        return name.value.decode(), cls._retain(t.value, self.ctx), bool(isp.value)

    def _state(self, params, buffers, persistent_only, prefix="", recurse=True, memo=None):
        """(name, tensor, is_param) in PyTorch's state_dict order; each tensor once (a tied
        parameter under its first name)."""
        if memo is None:
            memo = set()
        if _is_c(self):
            for i in range(self.num_state()):
                name, t, isp = self.state_entry(i)
                if (isp and not params) or (not isp and not buffers):
                    continue
                if not recurse and "." in name:
                    continue
                key = int(t.handle)
                if key in memo:
                    continue
                memo.add(key)
                yield prefix + name, t, isp
            return
        if params:
            for name, p in self._parameters.items():
                if p is None or int(p.handle) in memo:
                    continue
                memo.add(int(p.handle))
                yield prefix + name, p, True
        if buffers:
            for name, b in self._buffers.items():
                if b is None or (persistent_only and name in self._non_persistent):
                    continue
                if int(b.handle) in memo:
                    continue
                memo.add(int(b.handle))
                yield prefix + name, b, False
        if recurse:
            for name, m in self._modules.items():
                if m is not None:
                    yield from m._state(params, buffers, persistent_only, prefix + name + ".",
                                        True, memo)

    def named_parameters(self, prefix="", recurse=True):
        for name, t, _ in self._state(True, False, False, prefix, recurse):
            yield name, t

    def parameters(self, recurse=True):
        """The parameters (a list, in registration order; PyTorch gives a generator)."""
        return [t for _, t in self.named_parameters(recurse=recurse)]

    def named_buffers(self, prefix="", recurse=True):
        for name, t, _ in self._state(False, True, False, prefix, recurse):
            yield name, t

    def buffers(self, recurse=True):
        return [t for _, t in self.named_buffers(recurse=recurse)]

    def num_params(self):
        """Number of parameter tensors."""
        if _is_c(self):
            return int(lib.dlt_module_num_params(self.handle))
        return len(self.parameters())

    def param_count(self):
        """Total number of parameter elements."""
        if _is_c(self):
            return int(lib.dlt_module_param_count(self.handle))
        return sum(int(p.numel) for p in self.parameters())

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """OrderedDict name -> tensor of the parameters and persistent buffers under
        PyTorch's names. The tensors share the module's memory (detached unless
        keep_vars=True, as PyTorch)."""
        out = collections.OrderedDict() if destination is None else destination
        for name, t, _ in self._state(True, True, True, prefix):
            out[name] = t if keep_vars else t.detach()
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies the values of state_dict (tensors of any context, numpy arrays or nested
        lists) into this module's parameters and buffers, converting the dtype where it
        differs. Everything is checked before anything is copied: with strict=True missing
        or unexpected keys are a RuntimeError, and a shape mismatch always is (PyTorch's
        messages). Returns (missing_keys, unexpected_keys) as PyTorch's named tuple."""
        own = collections.OrderedDict((n, t) for n, t, _ in self._state(True, True, True))
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errs = []
        if strict:
            if unexpected:
                errs.append("Unexpected key(s) in state_dict: %s. "
                            % ", ".join('"%s"' % k for k in unexpected))
            if missing:
                errs.append("Missing key(s) in state_dict: %s. "
                            % ", ".join('"%s"' % k for k in missing))
        plan = []
        for name, dst in own.items():
            if name not in state_dict:
                continue
            src = state_dict[name]
            if not isinstance(src, Tensor):
                from ._factories import tensor
                try:
                    src = tensor(src, dtype=dst.dtype, ctx=dst.ctx)
                except (TypeError, ValueError) as e:
                    errs.append('While copying the parameter named "%s": %s' % (name, e))
                    continue
            if tuple(src.shape) != tuple(dst.shape):
                errs.append("size mismatch for %s: copying a param with shape %s from "
                            "checkpoint, the shape in current model is %s."
                            % (name, _torch_size(src.shape), _torch_size(dst.shape)))
                continue
            plan.append((dst, src))
        if errs:
            raise RuntimeError("Error(s) in loading state_dict for %s:\n\t%s"
                               % (type(self).__name__, "\n\t".join(errs)))
        for dst, src in plan:
            dst.copy_(src)
        return _IncompatibleKeys(missing, unexpected)

    def find(self, name):
        """The state tensor called name (a parameter or a buffer)."""
        if _is_c(self):
            out = ctypes.c_void_p()
            check(lib.dlt_module_find(self.handle, enc(name), ctypes.byref(out)))
            return Tensor._retain(out.value, self.ctx)
        for n, t, _ in self._state(True, True, False):
            if n == name:
                return t
        raise KeyError("%s has no parameter or buffer %r" % (type(self).__name__, name))

    # ---- structure ---------------------------------------------------------------------------
    def named_children(self):
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self):
        return [m for _, m in self.named_children()]

    def named_modules(self, memo=None, prefix=""):
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name)

    def modules(self):
        return [m for _, m in self.named_modules()]

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- conversions ---------------------------------------------------------------------
    def set_format(self, format):
        """Converts the 4-D parameters to a memory format ("channels_last" for the CUDA
        tensor-core path). libdltrain modules convert in place."""
        fmt = _dt.memory_format(format)
        if _is_c(self):
            check(lib.dlt_module_set_format(self.handle, fmt))
            return self
        return self._apply_tensors(lambda t: t.to_format(fmt) if t.ndim == 4 and
                                   t.format != fmt else t, lambda m: m.set_format(fmt))

    def to(self, *args, **kwargs):
        """PyTorch's Module.to(device=None, dtype=None, non_blocking=False),
        to(dtype), to(tensor), to(memory_format=...): moves and converts in place and
        returns self. Python modules replace their Parameters and buffers with converted
        ones (fetch parameters after to(), and build optimizers after it, as PyTorch
        advises); a libdltrain module is rebuilt on the target context with its state
        copied. libdltrain modules keep float32 parameters: use autocast for half
        precision."""
        device, dtype, fmt, _ = parse_to_args(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point dtypes, but got desired "
                            "dtype=%r" % (dtype,))
        for m in self._native_roots():
            m._native_to(device, dtype, fmt)
        if not _is_c(self):
            def conv(t):
                if device is not None:
                    t = t.to(device)
                if dtype is not None and t.dtype.is_floating_point and t.dtype != dtype:
                    t = t.astype(dtype)
                if fmt is not None and fmt != _dt.preserve_format and t.ndim == 4 and \
                        t.format != fmt:
                    t = t.to_format(fmt)
                return t
            self._apply_tensors(conv, None, recurse_python=True)
        return self

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else
                       (device if isinstance(device, str) else "cuda:%d" % device))

    def float(self):
        return self.to(_dt.float32)

    def _native_roots(self):
        """The outermost libdltrain modules in this tree (self when it is one)."""
        if _is_c(self):
            return [self]
        out = []
        for m in self.children():
            out += m._native_roots()
        return out

    def _native_to(self, device, dtype, fmt):
        if dtype is not None and dtype != _dt.float32:
            raise errors.NotSupported(
                errors.ERR_NOT_SUPPORTED,
                "%s is a libdltrain module: its parameters stay float32 (use "
                "dltrain.autocast(dtype=%r) for half-precision compute)"
                % (type(self).__name__, dtype))
        if device is not None:
            target = _target_context(self.ctx, device)
            if target is not self.ctx:
                self._rebuild_on(target)
        if fmt is not None and fmt != _dt.preserve_format:
            self.set_format(fmt)

    def _apply_tensors(self, fn, native_fn, recurse_python=True):
        """Replaces each own Parameter/buffer t of this Python module (and of its Python
        children) by fn(t) where that gives another tensor; native children get
        native_fn(child) (None: left alone)."""
        d = self.__dict__
        for name, p in list(d["_parameters"].items()):
            if p is None:
                continue
            q = fn(p)
            if q is not p:
                d["_parameters"][name] = Parameter(q, requires_grad=p.requires_grad)
        for name, b in list(d["_buffers"].items()):
            if b is not None:
                d["_buffers"][name] = fn(b)
        for m in self.children():
            if _is_c(m):
                if native_fn is not None:
                    native_fn(m)
            elif recurse_python:
                m._apply_tensors(fn, native_fn, recurse_python)
        return self

    def _c_clone(self, ctx, swaps):
        """A new dlt_module like this one on ctx (owned; children included); appends
        (module, new handle) pairs to swaps."""
        ctor = self.__dict__.get("_ctor")
        if ctor is None:
            raise errors.NotSupported(errors.ERR_NOT_SUPPORTED,
                                      "%s cannot be rebuilt on another context (it was not "
                                      "made by a constructor of dltrain.nn)" % type(self).__name__)
        fn, cargs = ctor
        out = ctypes.c_void_p()
        check(fn(ctx.handle, *cargs, ctypes.byref(out)))
        h = _ModuleHandle(out.value, ctx)
        swaps.append((self, h))
        return h

    def _rebuild_on(self, ctx):
        """Moves a libdltrain module to another context: the same constructor there, the
        state copied entry by entry, the same mode and format; then the handles swap."""
        own = self.__dict__["_h"]
        if not own._owned:
            raise ValueError("%s belongs to a Sequential: move the Sequential instead"
                             % type(self).__name__)
        swaps = []
        new = self._c_clone(ctx, swaps)
        try:
            names = [(n, t) for n, t, _ in self._state(True, True, False)]
            cl = any(t.ndim == 4 and t.format == _dt.CHANNELS_LAST for _, t in names)
            if cl:
                check(lib.dlt_module_set_format(new.handle, _dt.CHANNELS_LAST))
            for n, t in names:
                out = ctypes.c_void_p()
                check(lib.dlt_module_find(new.handle, enc(n), ctypes.byref(out)))
                Tensor._retain(out.value, ctx).copy_(t)
            check(lib.dlt_module_set_training(new.handle, 1 if self.training else 0))
        except BaseException:
            new.close()
            raise
        for m, h in swaps:
            m.__dict__["_h"] = h
            m.__dict__["ctx"] = ctx
        own.close()

    # ---- checkpoints -------------------------------------------------------------------------
    def save(self, path):
        """Saves every state entry as a safetensors file (atomic)."""
        if _is_c(self):
            check(lib.dlt_module_save(self.handle, enc(path)))
        else:
            from .io import safetensors_save
            safetensors_save(path, self.state_dict())

    def load(self, path, strict=True):
        """Loads every state entry from a safetensors file (all or nothing)."""
        if _is_c(self):
            check(lib.dlt_module_load(self.handle, enc(path)))
            return self
        from .io import load_tensor
        names = [n for n, _, _ in self._state(True, True, True)]
        ctxs = {n: t.ctx for n, t, _ in self._state(True, True, True)}
        state = {}
        for n in names:
            try:
                state[n] = load_tensor(path, n, ctx=ctxs[n])
            except errors.DltError:
                if strict:
                    raise
        self.load_state_dict(state, strict=strict)
        return self

    load_state = load
    save_state = save

    # ---- printing ------------------------------------------------------------------------------
    def extra_repr(self):
        """The text inside this module's parentheses (override it, as in PyTorch)."""
        return ""

    def _get_name(self):
        return type(self).__name__

    def _repr_children(self):
        return [(k, m) for k, m in self._modules.items() if m is not None]

    def __repr__(self):
        if self.closed:
            return "<dltrain.nn.%s closed>" % type(self).__name__
        return _repr_tree(self._get_name(), self.extra_repr(),
                          [(k, repr(m)) for k, m in self._repr_children()])

    def summary(self):
        """A table of the state (names, shapes, dtypes, element counts) and the parameter
        totals."""
        return summary(self)


def _torch_size(shape):
    return "torch.Size([%s])" % ", ".join(str(s) for s in shape)


class _IncompatibleKeys(collections.namedtuple("IncompatibleKeys",
                                               ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(s, n):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(n * " " + line for line in lines)


def _repr_tree(name, extra, children):
    """PyTorch's Module.__repr__ layout from a name, its extra_repr and (key, repr) pairs."""
    extra_lines = extra.split("\n") if extra else []
    child_lines = ["(%s): %s" % (k, _addindent(r, 2)) for k, r in children]
    lines = extra_lines + child_lines
    s = name + "("
    if lines:
        if len(extra_lines) == 1 and not child_lines:
            s += extra_lines[0]
        else:
            s += "\n  " + "\n  ".join(lines) + "\n"
    return s + ")"


def summary(model):
    """The module's state as a table: name, shape, dtype and element count of every
    parameter and persistent buffer, then the totals."""
    rows = [("Name", "Shape", "Dtype", "Kind", "Elements")]
    n_params = n_train = n_buf = 0
    for name, t, isp in model._state(True, True, True):
        n = int(t.numel)
        rows.append((name, "[%s]" % ", ".join(str(s) for s in t.shape), t.dtype.long_name,
                     "param" if isp else "buffer", "{:,}".format(n)))
        if isp:
            n_params += n
            if t.requires_grad:
                n_train += n
        else:
            n_buf += n
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    fmt = "  ".join("%%-%ds" % w if i < 4 else "%%%ds" % w for i, w in enumerate(widths))
    out = [fmt % rows[0], "-" * (sum(widths) + 8)]
    out += [fmt % r for r in rows[1:]]
    out.append("-" * (sum(widths) + 8))
    out.append("%s: %s parameters (%s trainable), %s buffer elements"
               % (model._get_name(), "{:,}".format(n_params), "{:,}".format(n_train),
                  "{:,}".format(n_buf)))
    return "\n".join(out)
