"""The binding on a CUDA context (skipped without a GPU): transfers, a mixed-precision
training step, and a captured step replayed through the ctypes callback."""

import dltrain
import dltrain.functional as F

from util import Skip, cpu


def _cuda(seed=0):
    if dltrain.cuda_device_count() == 0:
        raise Skip("no CUDA device (built with CUDA: %s)" % dltrain.built_with_cuda())
    return dltrain.Context("cuda", seed=seed)


def test_cuda_tensor_round_trips():
    ctx = _cuda()
    host = cpu()
    vals = [[float(i * 4 + j) / 8 for j in range(4)] for i in range(3)]
    t = dltrain.tensor(vals, ctx=ctx)
    assert t.is_cuda and t.device == "cuda:0"
    assert t.tolist() == vals and t.to_ctx(host).tolist() == vals
    back = dltrain.tensor(vals, ctx=host).to_ctx(ctx)
    assert back.ctx is ctx and back.tolist() == vals
    assert t.astype("f16").astype("f32").tolist() == vals
    try:
        import numpy as np
    except ImportError:
        return
    a = np.random.RandomState(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    c = dltrain.from_numpy(a, "channels_last", ctx=ctx)
    assert np.array_equal(c.numpy(), a)


def _mlp(ctx):
    import math

    def param(shape, fan_in):
        b = 1.0 / math.sqrt(fan_in)
        return dltrain.rand(shape, low=-b, high=b, ctx=ctx).requires_grad_()
    return [param((32, 8), 8), param((32,), 8), param((4, 32), 32), param((4,), 32)]


def _data(ctx, n=64):
    import random
    rng = random.Random(2)
    xs = [[(2.0 if j // 2 == i % 4 else 0.0) + rng.gauss(0, 0.3) for j in range(8)]
          for i in range(n)]
    return dltrain.tensor(xs, ctx=ctx), dltrain.tensor([i % 4 for i in range(n)], ctx=ctx)


def test_cuda_mixed_precision_training_loss_falls():
    ctx = _cuda(seed=3)
    w1, b1, w2, b2 = _mlp(ctx)
    x, y = _data(ctx)
    opt = dltrain.optim.SGD([w1, b1, w2, b2], lr=0.2)
    scaler = dltrain.GradScaler(ctx=ctx)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        with dltrain.autocast(dtype=dltrain.float16, ctx=ctx):
            logits = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
            assert logits.dtype == dltrain.f16
            loss = F.cross_entropy(logits, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert w1.grad is None or w1.grad.dtype == dltrain.f32
    assert losses[-1] < 0.2 * losses[0], (losses[0], losses[-1])


def test_cuda_graph_replays_a_training_step():
    ctx = _cuda(seed=4)
    params = _mlp(ctx)
    w1, b1, w2, b2 = params
    x, y = _data(ctx)
    opt = dltrain.optim.SGD(params, lr=0.1)
    scaler = dltrain.GradScaler(ctx=ctx)

    def step():
        opt.zero_grad()
        with dltrain.autocast(dtype=dltrain.float16, ctx=ctx):
            loss = F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def eval_loss():
        with dltrain.no_grad(ctx):
            return F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y).item()
    loss0 = eval_loss()
    g = dltrain.Graph(step, warmup=3, ctx=ctx)
    assert g.is_captured, "the step was not captured (see the log callback's warning)"
    assert g.num_nodes > 0
    st = g.stats()
    assert st["nodes"] == g.num_nodes and st["kernels"] > 0 and 0 < st["depth"] <= st["nodes"], st
    before = w2.tolist()
    steps0 = opt.step_count
    for _ in range(5):
        g.run()
    ctx.synchronize()
    assert opt.step_count == steps0 + 5
    after = w2.tolist()
    assert any(abs(a - b) > 0 for ra, rb in zip(after, before) for a, b in zip(ra, rb))
    loss1 = eval_loss()
    assert loss1 < loss0, (loss0, loss1)  # 3 eager warm-up steps and 5 replayed ones
