"""GPT models (include/dltrain/gpt.h), spelled as nanoGPT's model.py.

    from dltrain.nn import GPT, GPTConfig

    model = GPT(GPTConfig.preset("shakespeare-char"))     # or GPT("gpt2"), GPT(GPTConfig(n_layer=4, ...))
    logits, loss = model(idx, targets)                     # idx, targets: int64 [B, T]
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    ids = model.generate([0], 100, temperature=0.8, top_k=200, seed=1337)

    model = GPT.from_hf("gpt2-dir")                        # a Hugging Face GPT-2 directory
    model.save_hf("out-dir")                               # GPT2LMHeadModel.from_pretrained reads it

The state names are nanoGPT's ("transformer.h.0.attn.c_attn.weight", "lm_head.weight" being
the token embedding when tied), so state_dict(), dltrain.save/load and the optimizers work
as with any module. Two differences from nanoGPT: forward always returns the logits of every
position (nanoGPT returns only the last one without targets), and a padded vocabulary
(padded_vocab_size) keeps its extra columns out of the loss.
"""

import ctypes
import dataclasses

from ._handle import arg
from ._layers import _Native, _ctx
from ._lib import lib, check, enc
from ._tensor import Tensor
from .context import device_context


class _ConfigStruct(ctypes.Structure):  # dlt_gpt_config (gpt.h)
    _fields_ = [("size", ctypes.c_uint32), ("n_layer", ctypes.c_int32), ("n_head", ctypes.c_int32),
                ("bias", ctypes.c_int32), ("tied", ctypes.c_int32), ("pad_", ctypes.c_int32),
                ("n_embd", ctypes.c_int64), ("vocab_size", ctypes.c_int64),
                ("padded_vocab_size", ctypes.c_int64), ("block_size", ctypes.c_int64),
                ("dropout", ctypes.c_double)]


@dataclasses.dataclass
class GPTConfig:
    """A GPT's shape (nanoGPT's GPTConfig plus tied and padded_vocab_size). The defaults are
    GPT-2 124M's (vocabulary 50257; padded_vocab_size 0 means none)."""

    block_size: int = 1024
    vocab_size: int = 50257
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    tied: bool = True
    padded_vocab_size: int = 0

    PRESETS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "shakespeare-char", "tiny")

    @classmethod
    def preset(cls, name, **overrides):
        """The library's named shapes (PRESETS), with fields overridden by keyword."""
        c = _ConfigStruct()
        check(lib.dlt_gpt_config_preset_init(enc(name), ctypes.byref(c), ctypes.sizeof(c)))
        return dataclasses.replace(cls._from_c(c), **overrides)

    @classmethod
    def _from_c(cls, c):
        return cls(block_size=c.block_size, vocab_size=c.vocab_size, n_layer=c.n_layer,
                   n_head=c.n_head, n_embd=c.n_embd, dropout=c.dropout, bias=bool(c.bias),
                   tied=bool(c.tied), padded_vocab_size=c.padded_vocab_size)

    def _to_c(self):
        c = _ConfigStruct()
        lib.dlt_gpt_config_init(ctypes.byref(c), ctypes.sizeof(c))
        c.n_layer, c.n_head, c.n_embd = int(self.n_layer), int(self.n_head), int(self.n_embd)
        c.vocab_size, c.block_size = int(self.vocab_size), int(self.block_size)
        c.padded_vocab_size = int(self.padded_vocab_size or 0)
        c.bias, c.tied, c.dropout = 1 if self.bias else 0, 1 if self.tied else 0, float(self.dropout)
        return c


def _config(config):
    if config is None:
        return GPTConfig()
    if isinstance(config, str):
        return GPTConfig.preset(config)
    if isinstance(config, GPTConfig):
        return config
    raise TypeError("config must be a GPTConfig, a preset name or None, got %s" % type(config).__name__)


class GPT(_Native):
    """nanoGPT's GPT (model.py) as a libdltrain module: GPT-2's initialisation drawn from the
    context's generator (seed the context for a reproducible model)."""

    def __init__(self, config=None, *, ctx=None, device=None, dtype=None):
        c = _config(config)._to_c()
        self.__dict__["_cfg_struct"] = c  # the constructor's argument, kept for to()
        self._make(lib.dlt_gpt_create, _ctx(ctx, device, dtype), ctypes.byref(c))

    @classmethod
    def from_hf(cls, path, *, ctx=None, device=None):
        """A GPT from a Hugging Face GPT-2 directory (config.json + model.safetensors)."""
        c = device_context(device, ctx)
        out = ctypes.c_void_p()
        check(lib.dlt_gpt_from_hf(c.handle, enc(path), ctypes.byref(out)))
        m = cls.__new__(cls)
        _Native.__init__(m)
        cs = _ConfigStruct()
        lib.dlt_gpt_config_init(ctypes.byref(cs), ctypes.sizeof(cs))
        check(lib.dlt_gpt_get_config(out.value, ctypes.byref(cs)))
        m.__dict__["_cfg_struct"] = cs
        m._attach(out.value, c, (lib.dlt_gpt_create, (ctypes.byref(cs),)))
        return m

    @property
    def config(self):
        c = _ConfigStruct()
        lib.dlt_gpt_config_init(ctypes.byref(c), ctypes.sizeof(c))
        check(lib.dlt_gpt_get_config(self.handle, ctypes.byref(c)))
        return GPTConfig._from_c(c)

    def forward(self, idx, targets=None):
        """(logits [B, T, padded vocabulary], loss): the mean cross-entropy over the real
        vocabulary when targets are given (-1 entries ignored), else None."""
        logits, loss = ctypes.c_void_p(), ctypes.c_void_p()
        t = arg(targets, Tensor, "targets", optional=True)
        check(lib.dlt_gpt_forward(self.handle, arg(idx, Tensor, "idx"), t, ctypes.byref(logits),
                                  ctypes.byref(loss) if t else None))
        return (Tensor._wrap(logits.value, self.ctx),
                Tensor._wrap(loss.value, self.ctx) if t else None)

    def loss(self, idx, targets):
        """The loss alone (the logits are not handed out)."""
        loss = ctypes.c_void_p()
        check(lib.dlt_gpt_forward(self.handle, arg(idx, Tensor, "idx"), arg(targets, Tensor, "targets"),
                                  None, ctypes.byref(loss)))
        return Tensor._wrap(loss.value, self.ctx)

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, *, seed=0):
        """nanoGPT's generate for one sequence: idx is the prompt (a list of ids, or an integer
        Tensor [T] or [1, T]); returns the prompt followed by max_new_tokens sampled ids, as a
        list (or an int64 Tensor [1, n] when idx was a Tensor). Sampling is seeded by `seed`:
        the same ids on every device. dlt_gpt_generate underneath: a key/value cache while the
        sequence fits block_size (the prompt once, then each new token alone), then the last
        block_size tokens again each step."""
        as_tensor = isinstance(idx, Tensor)
        ids = idx.tolist() if as_tensor else list(idx)
        while ids and isinstance(ids[0], list):
            if len(ids) != 1:
                raise ValueError("generate takes one sequence (a batch of 1)")
            ids = ids[0]
        ids = [int(i) for i in ids]
        n = len(ids) + int(max_new_tokens)
        prompt = (ctypes.c_int64 * max(len(ids), 1))(*ids)
        out = (ctypes.c_int64 * max(n, 1))()
        check(lib.dlt_gpt_generate(self.handle, prompt, len(ids), int(max_new_tokens), float(temperature),
                                   int(top_k or 0), int(seed), out))
        res = list(out[:n])
        if as_tensor:
            from ._factories import tensor
            return tensor([res], dtype="i64", device=self.ctx)
        return res

    def load_hf(self, path):
        """Loads a Hugging Face GPT-2 checkpoint (a model.safetensors file or its directory)
        into this model; all or nothing."""
        check(lib.dlt_gpt_load_hf(self.handle, enc(path)))
        return self

    def save_hf(self, path):
        """Writes a Hugging Face GPT-2 directory (model.safetensors + config.json)."""
        check(lib.dlt_gpt_save_hf(self.handle, enc(path)))

    def get_num_params(self, non_embedding=True):
        """nanoGPT's count: every parameter once (the tied head is the token embedding),
        minus the position embedding when non_embedding."""
        n = self.param_count()
        if non_embedding:
            n -= self.find("transformer.wpe.weight").numel()
        return n

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type=None):
        """nanoGPT's AdamW: weight decay on the tensors with 2 or more dimensions only."""
        from .optim import AdamW, nanogpt_param_groups
        return AdamW(nanogpt_param_groups(self, weight_decay), lr=learning_rate, betas=betas)

    def flops_per_token(self, T=None):
        """6 N + 12 L H Q T (nanoGPT's estimate_mfu, PaLM appendix B) at context T (the block
        size by default)."""
        c = self.config
        T = c.block_size if T is None else int(T)
        return 6 * self.get_num_params() + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * T

    def estimate_mfu(self, fwdbwd_per_iter, dt, peak_flops=312e12):
        """nanoGPT's estimate_mfu: achieved FLOP/s over peak_flops (A100 bf16 by default)."""
        T = self.config.block_size
        return self.flops_per_token(T) * T * fwdbwd_per_iter / dt / peak_flops

    def extra_repr(self):
        c = self.config
        return ("n_layer=%d, n_head=%d, n_embd=%d, vocab_size=%d, block_size=%d, bias=%s, dropout=%s"
                % (c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.block_size, c.bias, c.dropout))


__all__ = ["GPT", "GPTConfig"]
