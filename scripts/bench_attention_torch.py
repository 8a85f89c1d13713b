#!/usr/bin/env python3
"""PyTorch's F.scaled_dot_product_attention forward and backward per backend (flash, cudnn,
efficient, math), timed as examples/bench_attention times ours: q, k, v leaves from N(0, 1),
dO from N(0, 1), each step the forward then backward(dO) between CUDA events, the median of
--steps after --warmup. Prints rows of the same table.

  python3 scripts/bench_attention_torch.py [--batch 16] [--heads 12] [--context 1024]
      [--head-dim 64] [--amp bf16|fp16] [--causal 1] [--steps 20] [--warmup 3]
"""
import argparse
import statistics
import sys


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--batch", type=int, default=16)
    a.add_argument("--heads", type=int, default=12)
    a.add_argument("--context", type=int, default=1024)
    a.add_argument("--head-dim", type=int, default=64)
    a.add_argument("--amp", choices=["bf16", "fp16"], default="bf16")
    a.add_argument("--causal", type=int, choices=[0, 1], default=1)
    a.add_argument("--steps", type=int, default=20)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--sdp", help="bench_attention's path list; ignored here (every backend runs)")
    o = a.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dt = torch.bfloat16 if o.amp == "bf16" else torch.float16
    shape = (o.batch, o.heads, o.context, o.head_dim)
    mm = 2.0 * o.batch * o.heads * o.context * o.context * o.head_dim
    half = 0.5 if o.causal else 1.0
    print(f"# torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}) on "
          f"{torch.cuda.get_device_name()}")
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    for name, be in backends:
        q, k, v = (torch.randn(shape, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        do = torch.randn(shape, device="cuda", dtype=dt)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        fwd, bwd = [], []
        try:
            with sdpa_kernel([be]):
                for s in range(o.warmup + o.steps):
                    ev[0].record()
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(o.causal))
                    ev[1].record()
                    out.backward(do)
                    ev[2].record()
                    torch.cuda.synchronize()
                    if s >= o.warmup:
                        fwd.append(ev[0].elapsed_time(ev[1]))
                        bwd.append(ev[1].elapsed_time(ev[2]))
        except Exception as e:  # a backend that cannot serve the shape
            print(f"| PyTorch | {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:80]} | | | | |")
            continue
        f, b = statistics.median(fwd), statistics.median(bwd)
        print(f"| PyTorch | {name} | {f:.3f} | {b:.3f} | {f + b:.3f} | {2 * mm * half / (f * 1e9):.1f} | "
              f"{5 * mm * half / (b * 1e9):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
