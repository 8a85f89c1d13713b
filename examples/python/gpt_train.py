#!/usr/bin/env python3
"""nanoGPT's train.py through libdltrain's Python binding: the twin of examples/gpt_train.c.

Same options, same loop, same numbers: on the CPU the two print the same losses and write
byte-identical checkpoints (tests/scripts/gpt_examples.sh checks it). docs/gpt.md explains
the options; `--help` lists them.

    python3 examples/python/gpt_train.py --text ../shared/data/tinyshakespeare/input.txt \\
        --recipe shakespeare-char
    python3 examples/python/gpt_train.py --preset tiny --device cpu --iters 50

The binding finds libdltrain as an installed library (libdltrain.so.1) or through
DLTRAIN_LIBRARY=/path/to/libdltrain.so; from a source checkout this script also finds the
package in bindings/python. Exit status: 0, 1 (a library failure: its message), 2 (usage).
"""

import argparse
import ctypes
import json
import os
import platform
import socket
import sys
import time

try:
    import dltrain
except ImportError:  # running from a source checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "bindings", "python"))
    import dltrain
import dltrain.functional as F
from dltrain.amp import GradScaler, autocast
from dltrain.data import TokenDataset, TokenLoader, char_dataset
from dltrain.io import SafeTensors, checkpoint_load, checkpoint_save
from dltrain.nn import GPT, GPTConfig
from dltrain.optim import AdamW

PROG = "gpt_train"
AMP = {"bf16": "bf16", "fp16": "f16", "fp32": None}
BOOLS = {"true": True, "false": False, "True": True, "False": False, "on": True, "off": False,
         "1": True, "0": False}


def bounded(kind, lo, hi):
    def parse(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not %s" % (s, "an integer" if kind is int else "a number"))
        if v != v or not lo <= v <= hi:  # NaN too
            raise argparse.ArgumentTypeError("%s is outside %g..%g" % (s, lo, hi))
        return v
    return parse


class Recipe(argparse.Action):
    """nanoGPT's config/train_shakespeare_char.py, applied where --recipe stands."""

    def __call__(self, parser, ns, value, option_string=None):
        if value != "shakespeare-char":
            parser.error("bad value for --recipe: %s (expected shakespeare-char)" % value)
        ns.recipe = True
        ns.preset, ns.n_layer, ns.n_head, ns.n_embd, ns.dropout, ns.bias = "shakespeare-char", 6, 6, 384, 0.2, False
        ns.out = "out-shakespeare-char"
        ns.eval_interval, ns.eval_iters, ns.log_interval = 250, 200, 10
        ns.accum, ns.batch, ns.context = 1, 64, 256
        ns.lr, ns.iters, ns.lr_decay_iters, ns.min_lr, ns.beta2, ns.warmup_iters = 1e-3, 5000, 5000, 1e-4, 0.99, 100
        ns.beta1, ns.weight_decay, ns.grad_clip, ns.amp = 0.9, 0.1, 1.0, "bf16"


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--device", choices=["cuda", "cpu"], help="cuda or cpu (cuda when present)")
    a("--preset", default="gpt2", choices=GPTConfig.PRESETS, help="model shape (gpt2)")
    a("--recipe", action=Recipe, help="shakespeare-char: nanoGPT's recipe; options after it override it")
    a("--n-layer", type=bounded(int, 1, 4096))
    a("--n-head", type=bounded(int, 1, 4096))
    a("--n-embd", type=bounded(int, 1, 65536))
    a("--dropout", type=bounded(float, 0, 0.99))
    a("--bias", type=lambda s: BOOLS[s] if s in BOOLS else p.error("bad value for --bias: " + s))
    a("--text", help="UTF-8 text, character level (90/10 split)")
    a("--tokens", help="TRAIN[,VAL] uint16 token files")
    a("--format", default="llmc", choices=["llmc", "raw"])
    a("--vocab", type=bounded(int, 1, 65536))
    a("--pad-vocab", type=bounded(int, 1, 65536))
    a("--synthetic-tokens", type=bounded(int, 2, 2 ** 31 - 1), default=1000000)
    a("--batch", type=bounded(int, 1, 65536), default=12)
    a("--context", type=bounded(int, 1, 1048576))
    a("--iters", type=bounded(int, 0, 10 ** 9), default=5000)
    a("--accum", type=bounded(int, 1, 65536), default=1)
    a("--lr", type=bounded(float, 0, 10), default=6e-4)
    a("--min-lr", type=bounded(float, 0, 10))
    a("--beta1", type=bounded(float, 0, 0.999999), default=0.9)
    a("--beta2", type=bounded(float, 0, 0.999999), default=0.95)
    a("--weight-decay", type=bounded(float, 0, 10), default=0.1)
    a("--warmup-iters", type=bounded(int, 0, 10 ** 9))
    a("--lr-decay-iters", type=bounded(int, 1, 10 ** 9))
    a("--grad-clip", type=bounded(float, 0, 1e6), default=1.0)
    a("--amp", choices=list(AMP), default="bf16")
    a("--eval-interval", type=bounded(int, 0, 10 ** 9), default=250)
    a("--eval-iters", type=bounded(int, 1, 10 ** 6), default=200)
    a("--log-interval", type=bounded(int, 0, 10 ** 9), default=10)
    a("--out", help="checkpoint directory (DIR/ckpt.safetensors)")
    a("--save-every", type=bounded(int, 0, 10 ** 9), default=0)
    a("--resume", action="store_true")
    a("--eager", action="store_true")
    a("--deterministic", action="store_true")
    a("--sdp", choices=["cudnn", "flash", "math"], default="cudnn",
      help="attention kernels on CUDA: cuDNN's fused attention then flash (default), flash, or the reference")
    a("--sample", type=bounded(int, 0, 10 ** 6), default=0)
    a("--prompt")
    a("--temperature", type=bounded(float, 1e-3, 100), default=0.8)
    a("--top-k", type=bounded(int, 0, 65536), default=200)
    a("--seed", type=bounded(int, 0, 2 ** 63 - 1), default=1337)
    a("--peak-tflops", type=bounded(float, 1e-3, 1e6), default=989.0)
    a("--json", help="also write the run record (JSON, docs/run-record.md) to FILE")
    p.set_defaults(recipe=False)
    o = p.parse_args(argv)
    why = None
    if o.text and o.tokens:
        why = "--text and --tokens exclude each other"
    elif o.resume and not o.out:
        why = "--resume needs --out DIR (the checkpoint's directory)"
    elif o.recipe and not o.text and not o.tokens:
        why = "--recipe shakespeare-char needs the data: --text FILE (tiny Shakespeare)"
    if o.warmup_iters is None:
        o.warmup_iters = min(o.iters // 10, 100)
    if not why and (o.lr_decay_iters or max(o.iters, 1)) <= o.warmup_iters:
        why = "--lr-decay-iters (default --iters) must be above --warmup-iters"
    if why:
        p.error(why)
    return o


class Run:
    """The loop's state; the comments of examples/gpt_train.c apply."""

    def __init__(self, o):
        self.o = o
        self.best_val, self.best_iter, self.saved_iter = float(ctypes.c_float(1e9).value), -1, -1
        self.train_s = self.steady_s = self.log_s = 0.0
        self.steady_iters = self.log_iters = self.done = 0
        self.first_step_s = -1.0
        self.chunks = []

    # ---- timing: training only ----
    def close_segment(self, last):
        self.ctx.synchronize()
        t = time.monotonic()
        seg, n = t - self.t_mark, last - self.seg_first + 1
        if n > 0:
            self.train_s += seg
            self.log_s += seg
            self.log_iters += n
            c = self.chunk(last, self.t_mark)
            c["seconds"] += seg
            c["steps"] += n
            c["tokens"] += n * self.tokens_per_iter
            c["t_end"] = t
            if self.seg_first >= self.steady_from:
                self.steady_s += seg
                self.steady_iters += n
                if c["epoch"] == self.start // self.steps_per_epoch:
                    c["steady_seconds"] += seg
                    c["steady_steps"] += n
        self.seg_first = last + 1
        self.t_mark = time.monotonic()

    def chunk(self, it, t_start):
        e = it // self.steps_per_epoch
        if not self.chunks or self.chunks[-1]["epoch"] != e:
            self.chunks.append(dict(epoch=e, steps=0, tokens=0, seconds=0.0, t_start=t_start, t_end=t_start,
                                    steady_seconds=0.0, steady_steps=0, peak=0))
        return self.chunks[-1]

    # ---- the step (examples/gpt_step.c) ----
    def step(self):
        o = self.o
        self.opt.zero_grad(set_to_none=True)
        for m in range(o.accum):
            x, y = self.loader.next()
            with autocast(dtype=AMP[o.amp], enabled=AMP[o.amp] is not None):
                loss = self.model.loss(x, y)
                scaled_loss = F.mul_scalar(loss, None, 1.0 / o.accum) if o.accum > 1 else loss
            self.scaler.scale(scaled_loss).backward()
            if m == o.accum - 1:
                self.loss_out.copy_(loss)
        # clip_grad_norm_ after unscale_ is the optimizer's (set_clip_grad_norm): the scaler's
        # step unscales, the AdamW step clips
        self.scaler.step(self.opt)
        self.scaler.update()

    def estimate_loss(self, loader, e):
        o = self.o
        loader.seek(e * o.eval_iters)
        self.model.eval()
        total = 0.0
        with dltrain.no_grad(self.ctx):
            for _ in range(o.eval_iters):
                x, y = loader.next()
                with autocast(dtype=AMP[o.amp], enabled=AMP[o.amp] is not None):
                    total += self.model.loss(x, y).item()
        self.model.train()
        return ctypes.c_float(total / o.eval_iters).value  # nanoGPT: the float32 mean

    # ---- checkpoints ----
    def ckpt_path(self):
        return os.path.join(self.o.out, "ckpt.safetensors")

    def save(self, iters_done):
        # the generator as the uninterrupted run has it now (replays count as eager steps)
        seed, offset = self.ctx.get_rng_state()
        signed = lambda v: v - 2 ** 64 if v >= 2 ** 63 else v  # the C program's (int64_t) cast
        i64 = lambda v: dltrain.tensor(v, dtype="i64", ctx=self.ctx)
        extra = {"train.iter": i64(iters_done), "train.loader_draw": i64(self.loader.position),
                 "train.best_val_iter": i64(self.best_iter), "train.rng_seed": i64(signed(seed)),
                 "train.rng_offset": i64(signed(offset)),
                 "train.best_val_loss": dltrain.tensor(self.best_val, dtype="f32", ctx=self.ctx)}
        checkpoint_save(self.ckpt_path(), self.model, self.opt, self.scaler, iters_done // self.steps_per_epoch,
                        iters_done, extra)
        print("saved %s (iteration %d)" % (self.ckpt_path(), iters_done))
        self.saved_iter = iters_done

    def load(self):
        path = self.ckpt_path()
        if not os.path.exists(path):
            raise dltrain.DltError(dltrain.errors.ERR_IO,
                                   "no checkpoint to resume from: %s does not exist" % path)
        _, step = checkpoint_load(path, self.model, self.opt, self.scaler)
        with SafeTensors(path) as f:
            get = lambda n: f.get_tensor(n, ctx=self.ctx).item()
            it, draw, self.best_iter = int(get("train.iter")), int(get("train.loader_draw")), int(get("train.best_val_iter"))
            seed, offset = int(get("train.rng_seed")) % 2 ** 64, int(get("train.rng_offset")) % 2 ** 64
            self.best_val = float(get("train.best_val_loss"))
        if it != step or draw < 0:
            raise dltrain.DltError(dltrain.errors.ERR_FORMAT,
                                   "%s: train.iter %d disagrees with train.step %d" % (path, it, step))
        self.loader.seek(draw)
        self.ctx.set_rng_state((seed, offset))
        print("resumed from %s at iteration %d (best val loss %.4f)" % (path, step, self.best_val))
        return step


def open_data(r, vocab):
    o, ctx = r.o, r.ctx
    r.tok = None
    if o.text:
        r.tok, r.train, r.val = char_dataset(o.text, 0.9, ctx=ctx)
        return r.tok.vocab_size
    if o.tokens:
        train, _, val = o.tokens.partition(",")
        r.train = TokenDataset(train, vocab, o.format, ctx=ctx)
        r.val = TokenDataset(val, vocab, o.format, ctx=ctx) if val else None
        return vocab
    print("note: no --text or --tokens given: training on %d synthetic tokens (uniform over %d)"
          % (o.synthetic_tokens, vocab))
    r.train = TokenDataset.synthetic(o.synthetic_tokens, vocab, o.seed + 10, ctx=ctx)
    r.val = TokenDataset.synthetic(max(o.synthetic_tokens // 10, o.context + 1), vocab, o.seed + 11, ctx=ctx)
    return vocab


def sample(r):
    o = r.o
    if r.tok is not None:
        prompt = r.tok.encode(o.prompt if o.prompt is not None else "\n")
    else:
        try:
            prompt = [int(v) for v in (o.prompt if o.prompt is not None else "0").split(",")]
            if any(v < 0 for v in prompt):
                raise ValueError
        except ValueError:
            print("%s: --prompt must be token ids like 1,2,3 (got \"%s\")" % (PROG, o.prompt), file=sys.stderr)
            return 1
    if not prompt:
        print("%s: --prompt is empty" % PROG, file=sys.stderr)
        return 1
    with autocast(dtype=AMP[o.amp], enabled=AMP[o.amp] is not None):
        out = r.model.generate(prompt, o.sample, o.temperature, o.top_k, seed=o.seed)
    print("--- sample: %d tokens, temperature %g, top-k %d, seed %d ---" % (o.sample, o.temperature, o.top_k, o.seed))
    print(r.tok.decode(out) if r.tok is not None else ",".join(str(v) for v in out))
    print("---")
    return 0


def gpu_columns(mon):
    d = mon.as_dict() if mon is not None and mon.available else {}
    f = lambda k: "n/a" if d.get(k) is None else "%.0f" % d[k]
    th, pw = d.get("thermal_throttle"), d.get("power_throttle")
    thr = "n/a" if th is None and pw is None else \
        "thermal+power" if th and pw else "thermal" if th else "power" if pw else "no"
    return dict(util=f("gpu_util_mean"), temp=f("temp_mean_c"), temp_max=f("temp_max_c"),
                clock=f("sm_clock_mean_mhz"), power=f("power_mean_w"), throttled=thr), d


def record(r, argv, started, t0, mode, mon, cfg):
    """The run record (docs/run-record.md) of examples/gpt_train.c, written atomically. The
    monitor's sample series is not read by the binding: it is recorded empty."""
    o, it_s = r.o, r.it_s
    utc = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % int(t % 1 * 1000)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None) \
        if os.path.exists("/proc/cpuinfo") else None
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    sw = {"libdltrain": dltrain.version_string(), "abi_version": dltrain.abi_version(),
          "built_with_cuda": bool(dltrain.built_with_cuda()), "cuda_driver": None, "cuda_runtime": None,
          "cudnn": None, "cublas": None}
    if o.device == "cuda":
        from dltrain.device import device_info
        i = device_info(0)
        ver = lambda v, cuda: None if not v else ("%d.%d" % (v // 1000, v % 1000 // 10) if cuda else
                                                  "%d.%d.%d" % (v // 10000, v % 10000 // 100, v % 100))
        sw.update(cuda_driver=ver(i["driver_version"], 1), cuda_runtime=ver(i["runtime_version"], 1),
                  cudnn=ver(i["cudnn_version"], 0), cublas=ver(i["cublas_version"], 0))
        dev = {"kind": "cuda", "index": 0, "name": i["name"],
               "compute_capability": "%d.%d" % (i["cc_major"], i["cc_minor"]), "arch": i["arch_name"]}
        for k in ("sm_count", "cuda_cores", "tensor_cores", "memory_bytes", "memory_bus_bits", "memory_clock_khz",
                  "l2_bytes", "sm_clock_khz", "pci_bus_id"):
            dev[k] = i.get(k)
        fp32 = 2.0 * i["cuda_cores"] * i["sm_clock_khz"] * 1e3 / 1e12 if i.get("cuda_cores") and i.get("sm_clock_khz") else None
        dev["theoretical"] = {"memory_bandwidth_gbps": i.get("memory_bandwidth_gbps"), "fp32_tflops": fp32}
        _, summary = gpu_columns(mon)
        avail = mon is not None and mon.available
        dev["monitor"] = None if mon is None else {
            "available": avail, "unavailable_reason": None if avail else mon.unavailable_reason,
            "interval_ms": 200, "t_start_s": 0.0, "duration_s": round(time.monotonic() - t0, 6),
            "summary": {k: v for k, v in summary.items() if isinstance(v, (int, float))} or
            {k: None for k in ("available", "samples", "gpu_util_mean", "temp_max_c", "sm_clock_mean_mhz",
                               "power_mean_w", "thermal_throttle_samples", "power_throttle_samples")},
            "series": dict({"stride": 1, "points": 0}, **{k: [] for k in (
                "t_s", "gpu_util", "mem_util", "temp_c", "sm_clock_mhz", "power_w", "mem_used_mib",
                "clock_event_reasons")})}
    else:
        dev = {"kind": "cpu", "index": 0, "name": cpu or "cpu", "logical_cpus": os.cpu_count(), "memory_bytes": mem,
               "monitor": None}
    rel = lambda t: round(t - t0, 6)
    epochs = [{"epoch": c["epoch"], "steps": c["steps"], "steps_per_epoch": r.steps_per_epoch,
               "samples": c["tokens"], "seconds": round(c["seconds"], 6), "t_start_s": rel(c["t_start"]),
               "t_end_s": rel(c["t_end"]), "peak_memory_bytes": c["peak"], "test_accuracy": None,
               "steady_seconds": round(c["steady_seconds"], 6) if c["steady_steps"] else None,
               "steady_steps": c["steady_steps"], "steady_samples": c["steady_steps"] * r.tokens_per_iter}
              for c in r.chunks]
    peak = max([c["peak"] for c in r.chunks] or [0])
    rec = {
        "schema": "libdltrain-run-record", "schema_version": 1,
        "program": {"name": PROG, "argv": [PROG] + list(argv)},
        "started_utc": utc(started), "finished_utc": utc(time.time()), "duration_s": rel(time.monotonic()),
        "notes": "written by examples/python/gpt_train.py (the NVML series is not recorded by the binding)",
        "host": {"hostname": socket.gethostname(), "os": "%s %s %s" % (platform.system(), platform.release(),
                                                                       platform.machine()),
                 "cpu_model": cpu, "logical_cpus": os.cpu_count(), "memory_bytes": mem},
        "software": sw, "devices": [dev],
        "workload": {
            "model": r.model_name, "parameters": r.model.param_count(),
            "precision": o.amp, "grad_scaler": o.amp == "fp16", "batch": o.batch, "accumulation": o.accum,
            "sequence_length": o.context, "mode": mode,
            "gpt": {"n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size,
                    "padded_vocab_size": cfg.padded_vocab_size, "block_size": cfg.block_size, "bias": cfg.bias,
                    "dropout": cfg.dropout},
            "optimizer": {"name": "adamw", "lr": o.lr, "min_lr": o.min_lr, "beta1": o.beta1, "beta2": o.beta2,
                          "weight_decay": o.weight_decay, "grad_clip": o.grad_clip, "warmup_iters": o.warmup_iters,
                          "lr_decay_iters": o.lr_decay_iters},
            "dataset": {"name": "text (characters)" if o.text else "token files" if o.tokens else "synthetic tokens",
                        "path": o.text or o.tokens, "train_samples": len(r.train), "sample_unit": "tokens"},
            "steps_limit": o.iters},
        "results": {
            "kind": "training", "sample_unit": "tokens",
            "epoch_time_s": len(r.train) / r.tokens_per_iter * it_s, "epoch_time_estimated": True,
            "throughput_per_s": r.tokens_per_iter / it_s, "first_step_s": round(r.first_step_s, 6),
            "peak_memory_bytes": peak if r.chunks else None, "test_accuracy": None, "iterations": r.done,
            "iteration_s": it_s, "mfu": r.flops_per_iter / it_s / (o.peak_tflops * 1e12) if o.device == "cuda" else None,
            "peak_tflops": o.peak_tflops,
            "best_val_loss": r.best_val if r.best_iter >= 0 else None, "epochs": epochs}}
    if r.best_iter >= 0:
        rec["results"]["best_val_iter"] = r.best_iter
    tmp = "%s.tmp.%d" % (o.json, os.getpid())
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, o.json)


def main(argv):
    o = parse_args(argv)
    started, t0 = time.time(), time.monotonic()
    if o.json and not os.path.isdir(os.path.dirname(os.path.abspath(o.json))):
        print("%s: cannot write %s: no such directory" % (PROG, o.json), file=sys.stderr)
        return 1
    if o.out:
        os.makedirs(o.out, exist_ok=True)
    if o.device is None:
        o.device = "cuda" if dltrain.cuda_is_available() else "cpu"
    r = Run(o)
    r.ctx = ctx = dltrain.Context(o.device, seed=o.seed)
    ctx.set_deterministic(o.deterministic)
    ctx.enable_flash_sdp(o.sdp != "math")
    ctx.enable_cudnn_sdp(o.sdp == "cudnn")
    with ctx:
        cfg = GPTConfig.preset(o.preset)
        for k in ("n_layer", "n_head", "n_embd", "dropout", "bias"):
            if getattr(o, k) is not None:
                setattr(cfg, k, getattr(o, k))
        if o.context:
            cfg.block_size = o.context
        o.context = cfg.block_size
        o.min_lr = o.lr / 10 if o.min_lr is None else o.min_lr
        o.lr_decay_iters = o.lr_decay_iters or max(o.iters, 1)
        vocab = open_data(r, o.vocab or min(cfg.vocab_size, 65536))
        cfg.vocab_size = vocab
        pad = o.pad_vocab or (128 if vocab > 1024 else 1)
        cfg.padded_vocab_size = (vocab + pad - 1) // pad * pad
        r.tokens_per_iter = o.batch * o.context * o.accum
        r.steps_per_epoch = max(-(-len(r.train) // r.tokens_per_iter), 1)
        print("tokens per iteration will be: %d" % r.tokens_per_iter)
        print("data: %s: %d training tokens, %s%d validation tokens, vocabulary %d"
              % (o.text or o.tokens or "synthetic", len(r.train), "" if r.val else "no split: ",
                 len(r.val) if r.val else 0, vocab))

        t_run0 = time.monotonic()
        r.model = model = GPT(cfg)
        cfg = model.config
        preset = GPTConfig.preset(o.preset)
        same = (preset.n_layer, preset.n_head, preset.n_embd) == (cfg.n_layer, cfg.n_head, cfg.n_embd)
        r.model_name = o.preset if same else "gpt %d/%d/%d" % (cfg.n_layer, cfg.n_head, cfg.n_embd)
        groups = dltrain.optim.nanogpt_param_groups(model, o.weight_decay)
        r.opt = AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=1e-8)
        if o.grad_clip > 0:  # nanoGPT's clip_grad_norm_(model.parameters(), grad_clip), in the step
            r.opt.set_clip_grad_norm(o.grad_clip, 2.0)
        r.loss_out = dltrain.zeros((), dtype="f32")
        r.scaler = GradScaler(65536.0, 2.0, 0.5, 2000, enabled=o.amp == "fp16")
        r.opt.schedule_warmup_cosine(o.warmup_iters, o.lr_decay_iters, o.min_lr)
        r.loader = TokenLoader(r.train, o.batch, o.context, o.seed)
        if o.eval_interval > 0:
            r.eval_train = TokenLoader(r.train, o.batch, o.context, o.seed + 1)
            r.eval_val = TokenLoader(r.val, o.batch, o.context, o.seed + 2) if r.val else None
        r.flops_per_iter = model.flops_per_token(o.context) * r.tokens_per_iter
        n_decay = sum(t.numel() for t in groups[0]["params"])
        n_nodecay = sum(t.numel() for t in groups[1]["params"])
        print("number of parameters: %.2fM (%s: %d layers, %d heads, %d wide, vocabulary %d%s, context %d, "
              "bias %s, dropout %g)" % (model.get_num_params() / 1e6, r.model_name, cfg.n_layer, cfg.n_head,
                                        cfg.n_embd, cfg.vocab_size,
                                        " padded" if cfg.padded_vocab_size != cfg.vocab_size else "",
                                        cfg.block_size, "on" if cfg.bias else "off", cfg.dropout))
        print("AdamW: %d parameters decayed (weight decay %g), %d not; lr %g -> %g (warm-up %d, decay to %d), "
              "betas %g/%g, clip %g" % (n_decay, o.weight_decay, n_nodecay, o.lr, o.min_lr, o.warmup_iters,
                                        o.lr_decay_iters, o.beta1, o.beta2, o.grad_clip))

        r.start = start = r.load() if o.resume else 0
        use_graph = not o.eager
        mode = "eager" if not use_graph else "graph" if ctx.is_cuda else "eager (no CUDA graphs on the CPU)"
        print("device %s, %s, %s, batch %d x %d x accum %d, iterations %d..%d; eval every %d on %d batches, "
              "log every %d" % (ctx.device_name, {"fp16": "fp16 + GradScaler", "bf16": "bf16", "fp32": "fp32"}[o.amp],
                                mode, o.batch, o.context, o.accum, start, o.iters, o.eval_interval, o.eval_iters,
                                o.log_interval), flush=True)
        if start >= o.iters:
            print("nothing to train: %s %d, --iters is %d" % ("the checkpoint is at iteration" if o.resume else
                                                              "starting at iteration", start, o.iters))
            return 0

        mon = dltrain.device.GpuMonitor(0, 200) if ctx.is_cuda else None
        r.steady_from = start + (2 if use_graph else 1)
        r.seg_first = start
        ctx.reset_peak_memory_stats()
        graph = None
        r.t_mark = time.monotonic()
        it = start
        while True:
            eval_now = o.eval_interval > 0 and it % o.eval_interval == 0
            save_now = bool(o.out) and o.save_every > 0 and it > start and (it % o.save_every == 0 or it == o.iters)
            if eval_now or save_now:
                r.close_segment(it - 1)
            if eval_now:
                e = it // o.eval_interval
                tl = r.estimate_loss(r.eval_train, e)
                vl = r.estimate_loss(r.eval_val, e) if r.eval_val else float("nan")
                print("step %d: train loss %.4f, val loss %.4f" % (it, tl, vl))
                if r.eval_val and vl < r.best_val:
                    r.best_val, r.best_iter = vl, it
                    if it > 0 and o.out and r.saved_iter != it:
                        r.save(it)
                sys.stdout.flush()
            if save_now and r.saved_iter != it:
                r.save(it)
            r.t_mark = time.monotonic()
            if it >= o.iters:
                break
            log_now = o.log_interval > 0 and it % o.log_interval == 0
            lr = r.opt.param_groups[0]["lr"] if log_now else 0.0
            if it == r.steady_from - 1 and use_graph and graph is None:
                graph = dltrain.Graph(r.step, warmup=1, ctx=ctx)
            elif graph is not None:
                graph.run()
            else:
                r.step()
            r.done += 1
            chunk_end = (it + 1) % r.steps_per_epoch == 0
            if it in (start, r.steady_from - 1) or log_now or chunk_end or it + 1 == o.iters:
                r.close_segment(it)
            if it == start:
                r.first_step_s = time.monotonic() - t_run0
            if log_now:
                loss = r.loss_out.item()
                ms = 1000.0 * r.log_s / r.log_iters if r.log_iters else float("nan")
                line = "iter %d: loss %.4f, lr %.4e, time %.2fms, %.0f tok/s" % (it, loss, lr, ms,
                                                                               r.tokens_per_iter / (ms / 1000.0))
                if ctx.is_cuda:
                    line += ", mfu %.2f%%" % (100.0 * r.flops_per_iter / (ms / 1000.0) / (o.peak_tflops * 1e12))
                print(line, flush=True)
                r.log_s, r.log_iters = 0.0, 0
            if chunk_end or it + 1 == o.iters:
                r.chunk(it, r.t_mark)["peak"] = ctx.memory_stat(dltrain.MEM_PEAK_ALLOCATED)
                ctx.reset_peak_memory_stats()
            r.t_mark = time.monotonic()
            it += 1
        if mon is not None:
            mon.stop()
        if graph is not None and not graph.is_captured and ctx.is_cuda:
            mode = "eager (capture failed)"
        if o.sample > 0 and sample(r) != 0:
            return 1
        r.it_s = it_s = r.steady_s / r.steady_iters if r.steady_iters else r.train_s / max(r.done, 1)
        passes = len(r.train) / r.tokens_per_iter
        cols, _ = gpu_columns(mon)
        prec = {"fp16": "fp16+scaler", "bf16": "bf16", "fp32": "fp32"}[o.amp] + ", %dx%d" % (o.batch, o.context)
        if o.accum > 1:
            prec += ", accum %d" % o.accum
        peak = max([c["peak"] for c in r.chunks] or [0])
        print("\n| %-16s | %-22s | %-26s | %-14s | %-9s | %-12s | %-14s | %-8s | %-12s | %-6s | %-9s |"
              % ("model", "GPU", "precision", "epoch time (s)", "tokens/s", "GPU util (%)", "peak mem (MiB)",
                 "temp (C)", "temp max (C)", "SM MHz", "throttled"))
        print("|------------------|------------------------|----------------------------|----------------|-----------|"
              "--------------|----------------|----------|--------------|--------|-----------|")
        print("| %-16s | %-22.22s | %-26s | %-14.2f | %-9.0f | %-12s | %-14s | %-8s | %-12s | %-6s | %-9s |"
              % (r.model_name, ctx.device_name, prec, passes * it_s, r.tokens_per_iter / it_s, cols["util"],
                 "%.0f" % (peak / 1048576.0), cols["temp"], cols["temp_max"], cols["clock"], cols["throttled"]))
        line = ("epoch = one pass over %d training tokens = %.2f iterations; steady iteration %.2f ms"
                % (len(r.train), passes, 1000.0 * it_s))
        if ctx.is_cuda:
            line += ", MFU %.2f%% of %g TFLOP/s" % (100.0 * r.flops_per_iter / it_s / (o.peak_tflops * 1e12),
                                                     o.peak_tflops)
        print(line)
        line = "first step after start: %.2f s; mean board power: %s W" % (r.first_step_s, cols["power"])
        if r.best_iter >= 0:
            line += "; best val loss %.4f at iteration %d" % (r.best_val, r.best_iter)
        print(line, flush=True)
        if o.json:
            record(r, argv, started, t0, mode, mon, cfg)
            print("run record: %s" % o.json)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except dltrain.DltError as e:
        print("%s: %s" % (PROG, e.message), file=sys.stderr)
        sys.exit(1)
