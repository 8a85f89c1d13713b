#!/usr/bin/env python3
"""Writes the GPT golden fixtures of tests/test_gpt.c with PyTorch (run by /usr/bin/python3
with torch; any version from 1.13): a tiny GPT-2-shaped model written here from the
architecture in shared/reference/transformer-semantics.md (pre-LN blocks, causal attention,
tanh GELU, tied head), in float64, its weights under nanoGPT's names, one batch, the logits,
the loss, every parameter's gradient, and the losses of three AdamW steps (PyTorch's
torch.optim.AdamW, nanoGPT's parameter groups: weight decay on >= 2-D tensors only).

Files (safetensors, written by hand: no safetensors package needed), into tests/fixtures/gpt/:
  tiny_bias.weights.safetensors   state_dict (nanoGPT names; lm_head.weight omitted: tied)
  tiny_bias.hf.safetensors        the same weights as Hugging Face's GPT2LMHeadModel stores
                                  them (Conv1D weights transposed, causal-mask buffers added)
  tiny_bias.golden.safetensors    idx, targets, logits, loss, grad.<name>, adamw_losses
  tiny_nobias.*                   the same without biases (nanoGPT's bias=False, LayerNorm
                                  without bias), vocabulary padded from 65 to 72
Values are computed in float64 and stored as float32. Regenerate:
  /usr/bin/python3 tests/golden/gen_gpt_golden.py
"""
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "gpt")


def save_safetensors(path, tensors):
    header, chunks, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dt = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        raw = t.numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def make_params(cfg, gen):
    L, C, V, Vp, T, bias = cfg["n_layer"], cfg["n_embd"], cfg["vocab"], cfg["padded"], cfg["block"], cfg["bias"]
    p = {}

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * std

    def vec(n, base):  # LayerNorm weights near 1 / biases near 0, not exactly (a stronger test)
        return base + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)

    p["transformer.wte.weight"] = normal((Vp, C), 0.02 * 10)
    if Vp > V:
        p["transformer.wte.weight"][V:] = 0.0
    p["transformer.wpe.weight"] = normal((T, C), 0.02 * 10)
    for i in range(L):
        h = "transformer.h.%d." % i
        p[h + "ln_1.weight"] = vec(C, 1.0)
        if bias:
            p[h + "ln_1.bias"] = vec(C, 0.0)
        p[h + "attn.c_attn.weight"] = normal((3 * C, C), 0.1)
        if bias:
            p[h + "attn.c_attn.bias"] = vec(3 * C, 0.0)
        p[h + "attn.c_proj.weight"] = normal((C, C), 0.1)
        if bias:
            p[h + "attn.c_proj.bias"] = vec(C, 0.0)
        p[h + "ln_2.weight"] = vec(C, 1.0)
        if bias:
            p[h + "ln_2.bias"] = vec(C, 0.0)
        p[h + "mlp.c_fc.weight"] = normal((4 * C, C), 0.1)
        if bias:
            p[h + "mlp.c_fc.bias"] = vec(4 * C, 0.0)
        p[h + "mlp.c_proj.weight"] = normal((C, 4 * C), 0.1)
        if bias:
            p[h + "mlp.c_proj.bias"] = vec(C, 0.0)
    p["transformer.ln_f.weight"] = vec(C, 1.0)
    if bias:
        p["transformer.ln_f.bias"] = vec(C, 0.0)
    return {k: v.clone().requires_grad_(True) for k, v in p.items()}


def forward(p, cfg, idx, targets):
    L, H, C, V = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab"]
    B, T = idx.shape
    g = lambda k: p.get(k)
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(L):
        h = "transformer.h.%d." % i
        a = F.layer_norm(x, (C,), g(h + "ln_1.weight"), g(h + "ln_1.bias"), 1e-5)
        qkv = F.linear(a, g(h + "attn.c_attn.weight"), g(h + "attn.c_attn.bias"))
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        s = s.masked_fill(mask, float("-inf"))
        y = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, g(h + "attn.c_proj.weight"), g(h + "attn.c_proj.bias"))
        a = F.layer_norm(x, (C,), g(h + "ln_2.weight"), g(h + "ln_2.bias"), 1e-5)
        m = gelu_tanh(F.linear(a, g(h + "mlp.c_fc.weight"), g(h + "mlp.c_fc.bias")))
        x = x + F.linear(m, g(h + "mlp.c_proj.weight"), g(h + "mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), g("transformer.ln_f.weight"), g("transformer.ln_f.bias"), 1e-5)
    logits = F.linear(x, p["transformer.wte.weight"])  # tied head, padded columns included
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def make(name, cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    p = make_params(cfg, gen)
    B, T, V = 2, cfg["block"], cfg["vocab"]
    idx = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    targets[0, 3] = -1  # nanoGPT's ignore_index
    logits, loss = forward(p, cfg, idx, targets)
    loss.backward()
    gold = {"idx": idx, "targets": targets, "logits": logits.float(), "loss": loss.float().reshape(1)}
    for k, v in p.items():
        gold["grad." + k] = v.grad.float()
    # three AdamW steps from these weights on this batch (nanoGPT's groups)
    q = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
    decay = [v for v in q.values() if v.dim() >= 2]
    nodecay = [v for v in q.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        _, l = forward(q, cfg, idx, targets)
        losses.append(l.item())
        l.backward()
        opt.step()
    _, l = forward(q, cfg, idx, targets)
    losses.append(l.item())
    gold["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    os.makedirs(OUT, exist_ok=True)
    weights = {k: v.detach().float() for k, v in p.items()}
    save_safetensors(os.path.join(OUT, name + ".weights.safetensors"), weights)
    save_safetensors(os.path.join(OUT, name + ".golden.safetensors"), gold)
    if cfg["bias"]:  # Hugging Face's GPT2LMHeadModel layout
        hf = {}
        for k, v in weights.items():
            if k.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")):
                v = v.t()
            hf[k] = v
        for i in range(cfg["n_layer"]):
            hf["transformer.h.%d.attn.bias" % i] = torch.tril(torch.ones(1, 1, T, T))
        save_safetensors(os.path.join(OUT, name + ".hf.safetensors"), hf)
    print(name, "loss %.6f" % loss.item(), "adamw", ["%.6f" % x for x in losses])


if __name__ == "__main__":
    torch.manual_seed(0)
    make("tiny_bias", {"n_layer": 2, "n_head": 2, "n_embd": 16, "vocab": 29, "padded": 29, "block": 8, "bias": 1}, 1)
    make("tiny_nobias", {"n_layer": 2, "n_head": 4, "n_embd": 16, "vocab": 65, "padded": 72, "block": 8, "bias": 0}, 2)
