#!/usr/bin/env python3
"""ResNet50 on CIFAR-10 through libdltrain's Python binding.

The loop is the PyTorch script's, line for line: resnet50, SGD lr 0.01, a GradScaler,
autocast fp16 (on CUDA), cross-entropy, "Epoch e, Loss: l" printed every step. Printing
reads the loss, which waits for the device, as loss.item() does; --log-every N prints every
Nth step's and --log-every 0 each epoch's last, so the device runs ahead in between.

    # the CIFAR-10 binary release (data_batch_1..5.bin, test_batch.bin)
    python3 examples/python/resnet50_cifar10.py --data data/cifar-10-batches-bin
    # no data at hand: a learnable synthetic dataset, a few steps on the CPU
    python3 examples/python/resnet50_cifar10.py --device cpu --batch 8 --steps 3

On CUDA each epoch's full batches replay one captured CUDA graph per step and the short
last batch runs as plain calls (examples/train.c's graph mode; the same losses as plain
calls). --eager (or --mode eager) opts out; the CPU has no graphs and runs plain calls.

The binding finds libdltrain as an installed library (libdltrain.so.1) or through
DLTRAIN_LIBRARY=/path/to/libdltrain.so; from a source checkout this script also finds the
package in bindings/python.
"""

import argparse
import os
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
from dltrain.data import CIFAR10, DataLoader, SyntheticDataset
from dltrain.nn import resnet50
from dltrain.optim import SGD


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="CIFAR-10 binary directory (default: synthetic data)")
    p.add_argument("--device", default=None,
                   help="cpu, cuda or cuda:N (default: cuda when a GPU is visible)")
    p.add_argument("--batch", type=int, default=256, help="batch size (256)")
    p.add_argument("--epochs", type=int, default=10, help="epochs (10)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
    p.add_argument("--num-classes", type=int, default=10,
                   help="classifier width (10; the PyTorch seed script used 1000)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--synthetic-size", type=int, default=50000,
                   help="images in the synthetic dataset (50000)")
    p.add_argument("--mode", choices=("eager", "graph"), default=None,
                   help="graph (one captured CUDA graph per step, replayed; the default on "
                   "CUDA) or eager (plain calls; the default on the CPU, which has no graphs)")
    p.add_argument("--eager", action="store_true",
                   help="plain calls instead of a captured graph (--mode eager)")
    p.add_argument("--log-every", type=int, default=1, metavar="N",
                   help="print the loss every N steps (1; 0: once per epoch)")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="time cuDNN's engines for each convolution shape in the first steps and "
                   "keep the fastest (torch.backends.cudnn.benchmark; the seed leaves it off)")
    args = p.parse_args()
    if args.log_every < 0:
        p.error("--log-every must be 0 or more")
    if args.eager:
        if args.mode == "graph":
            p.error("--eager and --mode graph contradict each other")
        args.mode = "eager"
    return args


def main():
    args = parse_args()
    device = args.device or ("cuda" if dltrain.cuda_is_available() else "cpu")
    ctx = dltrain.Context(device, seed=args.seed)
    if args.cudnn_benchmark:
        ctx.set_cudnn_benchmark(True)
    use_amp = ctx.is_cuda  # the PyTorch script's autocast and GradScaler are CUDA's
    use_graph = (args.mode or ("graph" if ctx.is_cuda else "eager")) == "graph"
    # what runs: an explicit --mode graph on the CPU takes the graph's path, as plain calls
    mode = ("eager" if not use_graph else "graph" if ctx.is_cuda
            else "eager (no CUDA graphs on the CPU)")

    with ctx:  # the current context of everything made below
        model = resnet50(args.num_classes)
        optimizer = SGD(model.parameters(), lr=args.lr)
        scaler = GradScaler(enabled=use_amp)
        if args.data:
            train_set = CIFAR10(args.data, train=True)
        else:
            train_set = SyntheticDataset(args.synthetic_size, num_classes=args.num_classes,
                                         seed=args.seed, learnable=True)
        train_loader = DataLoader(train_set, batch_size=args.batch, shuffle=True,
                                  seed=args.seed)
        print("libdltrain %s on %s: resnet50(%d), %d parameters, %d images, %d batches/epoch, "
              "mode %s" % (dltrain.version_string(), ctx.device_name, args.num_classes,
                           model.param_count(), len(train_set), len(train_loader), mode),
              flush=True)

        def train_step(inputs, targets):
            optimizer.zero_grad()
            with autocast(dtype=dltrain.float16, enabled=use_amp):
                outputs = model(inputs)
                loss = F.cross_entropy(outputs, targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            return loss

        # graph mode: the step takes its batch itself and leaves its loss in a tensor that
        # outlives the replays
        last_loss = dltrain.zeros((), dtype=dltrain.float32)

        def captured_step():
            inputs, targets = train_loader.next()
            last_loss.copy_(train_step(inputs, targets))

        def log(epoch, loss):  # reading the loss waits for the device
            print(f"Epoch {epoch}, Loss: {loss.item()}", flush=True)

        graph = None
        full_batches = len(train_set) // args.batch
        model.train()
        step = 0
        t0 = time.time()
        for epoch in range(args.epochs):
            train_loader.start_epoch(epoch)
            replays = 0
            epoch_loss = None  # --log-every 0: the epoch's last loss, read at its end
            for b in range(full_batches if use_graph else 0):
                if args.steps and step >= args.steps:
                    break
                if graph is None:  # its warm-up call is this step; the capture runs nothing
                    graph = dltrain.Graph(captured_step, warmup=1)
                    if ctx.is_cuda and not graph.is_captured:  # still right, only slower
                        print("note: the step could not be captured as a CUDA graph; "
                              "it runs as plain calls", flush=True)
                else:
                    graph.run()
                    replays += graph.is_captured
                if args.log_every and step % args.log_every == 0:
                    log(epoch, last_loss)
                epoch_loss = last_loss
                step += 1
            if replays:  # replays moved only the loader's device cursor
                train_loader.seek(train_loader.position + replays)
            while not (args.steps and step >= args.steps):
                batch = train_loader.next()
                if batch is None:
                    break
                loss = train_step(*batch)
                if args.log_every and step % args.log_every == 0:
                    log(epoch, loss)
                epoch_loss = loss
                step += 1
            if args.log_every == 0 and epoch_loss is not None:
                log(epoch, epoch_loss)
            if args.steps and step >= args.steps:
                break
        ctx.synchronize()  # the clock stops when the last step has run, not when it was queued
        dt = time.time() - t0
        print("%d steps in %.1f s (%.1f images/s)" % (step, dt, step * args.batch / max(dt, 1e-9)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
