"""Issue 19: subclassable dltrain.nn.Module with PyTorch's registration by assignment,
the same protocol on the library's layers, module.to(), load_state_dict, and print(model)
as PyTorch prints it (expected texts and hashes printed by torch 1.13 / torchvision 0.14
for the same structures; torch is not needed to run this file).
"""

import collections
import hashlib
import math
import os
import tempfile

import dltrain
import dltrain.functional as F
import dltrain.nn as nn

from util import assert_close, cpu, require


class MLP(nn.Module):
    """A Python module over Python Parameters and a libdltrain child."""

    def __init__(self, ctx, n_in=4, hidden=8, n_out=3):
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)
        self.w1 = nn.Parameter(dltrain.rand(hidden, n_in, low=-bound, high=bound, ctx=ctx))
        self.b1 = nn.Parameter(dltrain.zeros(hidden, ctx=ctx))
        self.head = nn.Linear(hidden, n_out, ctx=ctx)
        self.register_buffer("calls", dltrain.zeros((), ctx=ctx))
        self.register_buffer("scratch", dltrain.zeros(2, ctx=ctx), persistent=False)
        self.note = "plain attribute"

    def forward(self, x):
        return self.head(F.linear(x, self.w1, self.b1).relu())


def test_registration_by_assignment():
    require("dlt_linear_create")
    ctx = cpu(seed=1)
    m = MLP(ctx)
    assert [n for n, _ in m.named_parameters()] == ["w1", "b1", "head.weight", "head.bias"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())
    assert [n for n, _ in m.named_buffers()] == ["calls", "scratch"]
    assert list(m.state_dict()) == ["w1", "b1", "calls", "head.weight", "head.bias"]
    assert [n for n, _ in m.named_children()] == ["head"] and m.children() == [m.head]
    assert [n for n, _ in m.named_modules()] == ["", "head"]
    assert m.note == "plain attribute" and m.w1.shape == (8, 4)
    assert m.param_count() == 8 * 4 + 8 + 3 * 8 + 3 and m.num_params() == 4
    assert not m.is_native and m.head.is_native and m.kind is None
    assert m.head.kind == "linear" and m.head.weight.shape == (3, 8)
    # a tied parameter is listed once, under its first name
    m.w_again = m.w1
    assert len(m.parameters()) == 4
    del m.w_again
    assert "w_again" not in dict(m.named_parameters())
    # replacing and removing
    m.b1 = None
    assert [n for n, _ in m.named_parameters()][:2] == ["w1", "head.weight"]
    try:
        m.w1 = dltrain.zeros(8, 4, ctx=ctx)
    except TypeError as e:
        assert "Parameter" in str(e)
    else:
        raise AssertionError("a plain tensor replaced a parameter")
    m.calls = dltrain.ones((), ctx=ctx)  # buffers take plain tensors
    assert m.state_dict()["calls"].item() == 1.0
    try:
        m.missing
    except AttributeError as e:
        assert "'MLP' object has no attribute 'missing'" in str(e)
    else:
        raise AssertionError("unknown attribute resolved")

    class Early(nn.Module):
        def __init__(self):
            self.lin = nn.Linear(2, 2, ctx=ctx)

    try:
        Early()
    except AttributeError as e:
        assert "before Module.__init__() call" in str(e)
    else:
        raise AssertionError("assignment before __init__ accepted")
    try:
        nn.Linear(2, 2, ctx=ctx).extra = nn.Parameter(dltrain.ones(1, ctx=ctx))
    except TypeError as e:
        assert "libdltrain module" in str(e)
    else:
        raise AssertionError("a parameter was added to a libdltrain layer")


def test_forward_call_train_eval_zero_grad_and_an_optimizer():
    require("dlt_linear_create", "dlt_sgd_create")
    ctx = cpu(seed=2)
    m = MLP(ctx)
    # a learnable task: the class is the position of the one hot feature (plus noise)
    x = dltrain.tensor([[1.0 if j == i % 3 else 0.0 for j in range(4)] for i in range(16)],
                       ctx=ctx) + dltrain.rand(16, 4, low=-0.1, high=0.1, ctx=ctx)
    y = dltrain.tensor([i % 3 for i in range(16)], ctx=ctx)
    opt = dltrain.optim.SGD(m.parameters(), lr=0.5)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5, losses
    # forward is the Python one, equal to the same math done by hand
    h = F.linear(x, m.w1, m.b1).relu()
    assert_close(m(x).tolist(), F.linear(h, m.head.weight, m.head.bias).tolist())
    assert m.training and m.head.training
    assert m.eval() is m and not m.training and not m.head.training
    m.train()
    assert m.training and m.head.training
    assert m.w1.grad is not None
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    assert m.requires_grad_(False) is m and not m.w1.requires_grad

    class NoForward(nn.Module):
        pass

    try:
        NoForward()(x)
    except NotImplementedError as e:
        assert "forward" in str(e)
    else:
        raise AssertionError("a module without forward ran")


def test_library_layers_and_python_modules_nest_both_ways():
    require("dlt_linear_create", "dlt_sequential_create")
    ctx = cpu(seed=3)

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(dltrain.full((1,), 2.0, ctx=ctx))

        def forward(self, x):
            return x * self.s

    lib_seq = nn.Sequential(nn.Linear(4, 4, ctx=ctx), nn.ReLU(ctx=ctx))
    assert lib_seq.is_native  # every child is the library's: a dlt_sequential
    py_seq = nn.Sequential(lib_seq, Scale(), nn.Linear(4, 2, ctx=ctx))
    assert not py_seq.is_native  # a Python child: a Python container
    assert [n for n, _ in py_seq.named_parameters()] == [
        "0.0.weight", "0.0.bias", "1.s", "2.weight", "2.bias"]
    x = dltrain.rand(3, 4, ctx=ctx)
    y = py_seq(x)
    want = F.linear(lib_seq(x) * py_seq[1].s, py_seq[2].weight, py_seq[2].bias)
    assert_close(y.tolist(), want.tolist())
    assert len(py_seq) == 3 and len(py_seq[0:2]) == 2 and list(py_seq)[1] is py_seq[1]
    named = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 2, ctx=ctx)),
                                                   ("act", nn.ReLU(ctx=ctx))]))
    assert named.is_native and list(named.state_dict()) == ["fc.weight", "fc.bias"]
    try:
        lib_seq.append(Scale())
    except TypeError as e:
        assert "libdltrain modules only" in str(e)
    else:
        raise AssertionError("a Python module went into a dlt_sequential")


def test_state_dict_round_trip_and_load_errors():
    require("dlt_linear_create")
    a, b = MLP(cpu(seed=4)), MLP(cpu(seed=5))
    assert a.w1.tolist() != b.w1.tolist()
    r = b.load_state_dict(a.state_dict())  # across contexts
    assert r.missing_keys == [] and r.unexpected_keys == [] and \
        str(r) == "<All keys matched successfully>"
    for (n, ta), (_, tb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ta.tolist() == tb.tolist(), n
    # strict: missing and unexpected keys; nothing is copied when anything is wrong
    sd = a.state_dict()
    sd.pop("b1")
    sd["extra"] = dltrain.zeros(1)
    before = b.w1.tolist()
    c = MLP(cpu(seed=6))
    w_c = c.w1.tolist()
    try:
        c.load_state_dict(sd)
    except RuntimeError as e:
        msg = str(e)
        assert msg.startswith("Error(s) in loading state_dict for MLP:"), msg
        assert 'Unexpected key(s) in state_dict: "extra".' in msg
        assert 'Missing key(s) in state_dict: "b1".' in msg
    else:
        raise AssertionError("strict load accepted missing keys")
    assert c.w1.tolist() == w_c, "a failed load changed the module"
    r = c.load_state_dict(sd, strict=False)
    assert r.missing_keys == ["b1"] and r.unexpected_keys == ["extra"]
    assert c.w1.tolist() == a.w1.tolist()
    bad = a.state_dict()
    bad["head.weight"] = dltrain.zeros(2, 2)
    try:
        b.load_state_dict(bad, strict=False)
    except RuntimeError as e:
        assert ("size mismatch for head.weight: copying a param with shape torch.Size([2, 2]) "
                "from checkpoint, the shape in current model is torch.Size([3, 8]).") in str(e)
    else:
        raise AssertionError("a shape mismatch loaded")
    assert b.w1.tolist() == before
    # values may be lists or other dtypes (converted)
    b.load_state_dict({"b1": [1.0] * 8, "calls": dltrain.tensor(7)}, strict=False)
    assert b.b1.tolist() == [1.0] * 8 and b.state_dict()["calls"].item() == 7.0


def test_save_and_load_a_python_module():
    require("dlt_linear_create", "dlt_safetensors_save", "dlt_safetensors_load_tensor")
    a, b = MLP(cpu(seed=7)), MLP(cpu(seed=8))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mlp.safetensors")
        a.save(path)
        dltrain.save(a, path + "2")  # the module-level function takes Python modules too
        b.load(path)
        assert b.head.weight.tolist() == a.head.weight.tolist() and \
            b.w1.tolist() == a.w1.tolist()
        c = MLP(cpu(seed=9))
        dltrain.load(c, path + "2")
        assert c.w1.tolist() == a.w1.tolist()


def test_module_to_moves_and_converts():
    require("dlt_linear_create", "dlt_sequential_create", "dlt_conv2d_create")
    src, dst = cpu(seed=10), cpu(seed=11)
    m = MLP(src)
    m.extra = nn.Sequential(nn.Linear(3, 3, ctx=src), nn.ReLU(ctx=src))
    m.eval()
    x = dltrain.rand(2, 4, ctx=src)
    before = m.extra(m(x)).tolist()
    state = {k: v.tolist() for k, v in m.state_dict().items()}
    assert m.to("cpu") is m and m.head.ctx is src  # same device: nothing moves
    assert m.to(dst) is m
    assert all(p.ctx is dst for p in m.parameters()) and m.calls.ctx is dst
    assert m.head.ctx is dst and m.extra.ctx is dst and m.extra[0].ctx is dst
    assert {k: v.tolist() for k, v in m.state_dict().items()} == state
    assert not m.training and not m.head.training  # modes travel too
    assert m.extra(m(x.to(dst))).tolist() == before
    # a library layer alone, and its memory format
    conv = nn.Conv2d(2, 4, 3, padding=1, ctx=src)
    w = conv.weight.tolist()
    conv.to(dst, memory_format=dltrain.channels_last)
    assert conv.ctx is dst and conv.weight.is_channels_last and conv.weight.tolist() == w
    # issue 19: model.to('cuda') said "unknown memory format"
    if not dltrain.cuda_is_available():
        try:
            nn.Linear(2, 2, ctx=src).to("cuda")
        except dltrain.NoDevice:
            pass
        else:
            raise AssertionError("a CUDA move succeeded without a GPU")
    try:
        nn.Linear(2, 2, ctx=src).to(dltrain.float16)
    except dltrain.NotSupported as e:
        assert "autocast" in e.message
    else:
        raise AssertionError("a libdltrain layer became float16")
    try:
        m.to(dltrain.int32)
    except TypeError as e:
        assert "floating point" in str(e)
    else:
        raise AssertionError("a module became int32")
    # a Python module's own parameters may change dtype (its forward is its own affair)
    p = MLP(src)
    del p.head
    p.to(dltrain.float16)
    assert p.w1.dtype == dltrain.float16 and isinstance(p.w1, nn.Parameter)
    inner = nn.Sequential(nn.Linear(2, 2, ctx=src))
    try:
        inner[0].to(dst)
    except ValueError as e:
        assert "move the Sequential" in str(e)
    else:
        raise AssertionError("a child moved out of its container")


_NET_REPR = """Net(
  (features): Sequential(
    (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
    (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
    (2): ReLU()
    (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
    (4): AdaptiveAvgPool2d(output_size=(1, 1))
    (5): Flatten(start_dim=1, end_dim=-1)
  )
  (head): Linear(in_features=8, out_features=2, bias=True)
)"""

# sha256 and line count of repr(torchvision.models.resnetN(num_classes=10)), torchvision 0.14
_RESNET_REPRS = {
    18: (84, "64bf2d87b30ac20a529122ddb16fa1d9f063813fe6b0b1959a6750e389dcf8e5"),
    34: (140, "0cf5b5f7769175a3b83d13b7f2fe8bf9bf2f8ae3c2b24c4efa2c9455c30640df"),
    50: (176, "375ca995d35a3006de618361fbf6ff3718f52300c349907ac528409389f3275e"),
    101: (329, "92e872da2d07a74d1113fe3bde054ad62197b8545e5fea71341a7f83e00fc2c9"),
    152: (482, "855d81206ceb12cd9c4322e8e4d5a62928f4496aac5518d93671d28913c654db"),
}


def test_print_model_as_pytorch():
    require("dlt_conv2d_create", "dlt_sequential_create", "dlt_resnet_create")
    ctx = cpu()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1, bias=False, ctx=ctx), nn.BatchNorm2d(8, ctx=ctx),
                nn.ReLU(ctx=ctx), nn.MaxPool2d(2, ctx=ctx), nn.AdaptiveAvgPool2d((1, 1), ctx=ctx),
                nn.Flatten(ctx=ctx))
            self.head = nn.Linear(8, 2, ctx=ctx)
            self.scale = nn.Parameter(dltrain.ones(2, ctx=ctx))

    net = Net()
    assert repr(net) == _NET_REPR, "\n" + repr(net)
    assert list(net.state_dict()) == [
        "scale", "features.0.weight", "features.1.weight", "features.1.bias",
        "features.1.running_mean", "features.1.running_var", "features.1.num_batches_tracked",
        "head.weight", "head.bias"]
    assert repr(nn.Conv2d(4, 6, (1, 3), stride=2, padding=2, dilation=2, groups=2, bias=True,
                          ctx=ctx)) == ("Conv2d(4, 6, kernel_size=(1, 3), stride=(2, 2), "
                                        "padding=(2, 2), dilation=(2, 2), groups=2)")
    from dltrain._layers import resnet_repr
    for depth, (n_lines, digest) in _RESNET_REPRS.items():
        text = resnet_repr(depth, 10)  # what a ResNet of that depth prints
        assert len(text.splitlines()) == n_lines and \
            hashlib.sha256(text.encode()).hexdigest() == digest, "resnet%d:\n%s" % (depth, text)
    assert repr(nn.resnet18(10, ctx=ctx)) == resnet_repr(18, 10)  # one built for real
    block = nn.BasicBlock(64, 128, 2, ctx=ctx)
    assert repr(block).splitlines()[0] == "BasicBlock(" and "(downsample): Sequential(" in \
        repr(block)
    block.close()
    assert repr(block) == "<dltrain.nn.BasicBlock closed>"


def test_summary_lists_state_and_totals():
    require("dlt_linear_create", "dlt_resnet_create")
    ctx = cpu()
    m = MLP(ctx)
    text = m.summary()
    lines = text.splitlines()
    assert lines[0].split() == ["Name", "Shape", "Dtype", "Kind", "Elements"]
    assert any(l.split()[:2] == ["head.weight", "[3,"] for l in lines)
    assert lines[-1] == "MLP: 67 parameters (67 trainable), 1 buffer elements", lines[-1]
    r = nn.resnet18(10, ctx=ctx)
    last = nn.summary(r).splitlines()[-1]
    assert last.startswith("ResNet: {:,} parameters".format(r.param_count())), last
