#!/usr/bin/env python3
"""hf_gpt2_interop.py - Hugging Face GPT-2 checkpoints in and out of libdltrain (issue 17).

On a machine with torch and transformers (the GPU machine; CPU works too, slowly):

    DLTRAIN_LIBRARY=build-gpu/libdltrain.so PYTHONPATH=bindings/python \\
        python3 scripts/hf_gpt2_interop.py [--device cuda] [--config gpt2|small] [--batch 4] [--seq 64]

1. A randomly initialised transformers GPT2LMHeadModel (dropout off), save_pretrained.
2. dltrain.nn.GPT.from_hf loads it: same logits (fp32, TF32 off on both sides: relative
   error <= 1e-4) and the same loss on one batch.
3. Ours saved with save_hf loads back with GPT2LMHeadModel.from_pretrained: the same
   tensors bit for bit, and the same logits.
4. One AdamW step (nanoGPT's groups: weight decay 0.1 on 2-D tensors, lr 1e-3) on both sides
   from the same weights and batch: the losses after the step agree (relative <= 1e-4).
Prints one line per check ("ok ..." / "FAILED ..."), a JSON summary, and exits 1 on a failure.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

try:
    import dltrain
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
    import dltrain
from dltrain.nn import GPT

CONFIGS = {"gpt2": dict(n_layer=12, n_head=12, n_embd=768), "small": dict(n_layer=2, n_head=4, n_embd=128)}


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-30))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--config", default="gpt2", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False  # exact fp32 on both sides (ours: TF32 off by default)
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    dev = torch.device(a.device)
    cfg = GPT2Config(**CONFIGS[a.config], vocab_size=50257, n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0)
    hf = GPT2LMHeadModel(cfg).to(dev).train()  # dropout 0: train mode computes what eval mode does
    rng = np.random.default_rng(0)
    tok = rng.integers(0, cfg.vocab_size, (a.batch, a.seq + 1))
    x_t = torch.tensor(tok[:, :-1], device=dev)
    y_t = torch.tensor(tok[:, 1:], device=dev)

    def hf_forward(model):
        logits = model(input_ids=x_t).logits
        return logits, F.cross_entropy(logits.reshape(-1, logits.size(-1)), y_t.reshape(-1))

    failures, summary = [], {"config": a.config, "device": a.device, "batch": a.batch, "seq": a.seq}

    def check(name, ok, detail):
        print("%s %s: %s" % ("ok" if ok else "FAILED", name, detail), flush=True)
        if not ok:
            failures.append(name)

    ctx = dltrain.Context(a.device, seed=0)
    with tempfile.TemporaryDirectory() as d, ctx:
        hf_dir, ours_dir = os.path.join(d, "hf"), os.path.join(d, "ours")
        hf.save_pretrained(hf_dir, safe_serialization=True)
        ours = GPT.from_hf(hf_dir)
        x = dltrain.from_numpy(tok[:, :-1].astype(np.int64))
        y = dltrain.from_numpy(tok[:, 1:].astype(np.int64))
        with torch.no_grad():
            hl, hloss = hf_forward(hf)
        ol, oloss = ours(x, y)
        e = rel(ol.numpy(), hl.float().cpu().numpy())
        summary.update(logits_rel_err=e, loss_hf=hloss.item(), loss_ours=oloss.item())
        check("load HF into ours: logits", e <= a.tol, "relative error %.3g (<= %g)" % (e, a.tol))
        el = abs(oloss.item() - hloss.item()) / abs(hloss.item())
        check("load HF into ours: loss", el <= a.tol, "ours %.7f, transformers %.7f" % (oloss.item(), hloss.item()))

        ours.save_hf(ours_dir)
        back = GPT2LMHeadModel.from_pretrained(ours_dir).to(dev).train()
        sd_hf, sd_back = hf.state_dict(), back.state_dict()
        diff = [k for k in sd_hf if k in sd_back and not torch.equal(sd_hf[k], sd_back[k])]
        missing = [k for k in sd_hf if k not in sd_back and not k.endswith((".attn.bias", ".attn.masked_bias"))]
        check("ours saved, loaded by transformers: tensors", not diff and not missing,
              "%d tensors differ, %d missing%s" % (len(diff), len(missing), (" (first: %s)" % (diff + missing)[0])
                                                   if diff or missing else ""))
        with torch.no_grad():
            bl, _ = hf_forward(back)
        e2 = rel(bl.float().cpu().numpy(), hl.float().cpu().numpy())
        check("ours saved, loaded by transformers: logits", e2 <= 1e-6, "relative error %.3g" % e2)

        # one AdamW step on both sides (nanoGPT's groups), then the loss again
        decay = [p for p in hf.parameters() if p.dim() >= 2]
        rest = [p for p in hf.parameters() if p.dim() < 2]
        topt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                 lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
        topt.zero_grad()
        hf_forward(hf)[1].backward()
        topt.step()
        with torch.no_grad():
            hloss2 = hf_forward(hf)[1].item()
        oopt = ours.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
        oopt.zero_grad()
        ours.loss(x, y).backward()
        oopt.step()
        oloss2 = ours.loss(x, y).item()
        e3 = abs(oloss2 - hloss2) / abs(hloss2)
        summary.update(loss_after_step_hf=hloss2, loss_after_step_ours=oloss2)
        check("one AdamW step: loss", e3 <= a.tol, "ours %.7f, transformers %.7f (relative %.3g)" % (oloss2, hloss2, e3))
    summary["failures"] = failures
    print(json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
