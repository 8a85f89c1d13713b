"""The GPT binding (dltrain.gpt: GPTConfig, GPT) against the C library's results and the
PyTorch golden fixtures of tests/fixtures/gpt (tests/golden/gen_gpt_golden.py), plus the
generator-state and checkpoint-extra functions the GPT example resumes with."""

import math
import os
import tempfile

import dltrain
from dltrain.io import SafeTensors, checkpoint_load, checkpoint_save
from dltrain.nn import GPT, GPTConfig

from util import REPO, Skip, assert_close, cpu, require

FIXTURES = os.path.join(REPO, "tests", "fixtures", "gpt")


def test_presets_are_the_library_s():
    require("dlt_gpt_config_preset")
    t = GPTConfig.preset("tiny")
    assert (t.n_layer, t.n_head, t.n_embd, t.vocab_size, t.block_size, t.bias) == (2, 2, 32, 65, 32, False)
    s = GPTConfig.preset("shakespeare-char", dropout=0.1)
    assert (s.n_layer, s.n_head, s.n_embd, s.block_size, s.dropout) == (6, 6, 384, 256, 0.1)
    g = GPTConfig()
    assert (g.n_layer, g.n_embd, g.vocab_size, g.block_size, g.bias, g.tied) == (12, 768, 50257, 1024, True, True)
    try:
        GPTConfig.preset("gpt5")
        raise AssertionError("an unknown preset was accepted")
    except dltrain.InvalidArgument as e:
        assert "tiny" in str(e), str(e)  # the message lists the names


def test_names_counts_and_config_round_trip():
    require("dlt_gpt_create")
    with cpu(seed=3):
        m = GPT("tiny")
        names = [n for n, _ in m.named_parameters()]
        assert names[:3] == ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight"]
        assert "lm_head.weight" not in names  # tied: listed once, at the embedding
        assert "transformer.h.1.mlp.c_proj.weight" in m.state_dict()
        assert m.find("lm_head.weight").handle == m.find("transformer.wte.weight").handle  # one tensor
        # nanoGPT's counts: 65*32 + 32*32 + 2 layers * 12*32^2 (+ LayerNorm weights) + ln_f
        n = 65 * 32 + 32 * 32 + 2 * (12 * 32 * 32 + 2 * 32) + 32
        assert m.param_count() == n, (m.param_count(), n)
        assert m.get_num_params() == n - 32 * 32
        assert m.get_num_params(non_embedding=False) == n
        c = m.config
        assert (c.n_layer, c.vocab_size, c.block_size, c.bias) == (2, 65, 32, False)
        assert m.flops_per_token() == 6 * (n - 1024) + 12 * 2 * 2 * 16 * 32
        assert "n_layer=2" in repr(m)


def _fixture_model(bias):
    """tests/test_gpt.c's tiny shapes, with the fixture's weights (nanoGPT names)."""
    cfg = GPTConfig(n_layer=2, n_embd=16, block_size=8, bias=bias, tied=True, dropout=0.0,
                    n_head=2 if bias else 4, vocab_size=29 if bias else 65, padded_vocab_size=0 if bias else 72)
    m = GPT(cfg)
    prefix = "tiny_bias" if bias else "tiny_nobias"
    r = dltrain.load(m, os.path.join(FIXTURES, prefix + ".weights.safetensors"), strict=False)
    assert r.missing_keys in ([], ["lm_head.weight"]), r
    return m, os.path.join(FIXTURES, prefix + ".golden.safetensors")


def test_forward_matches_pytorch_golden():
    require("dlt_gpt_forward")
    if not os.path.exists(os.path.join(FIXTURES, "tiny_bias.golden.safetensors")):
        raise Skip("no fixtures under " + FIXTURES)
    with cpu():
        for bias in (True, False):
            m, golden = _fixture_model(bias)
            with SafeTensors(golden) as f:
                idx, tgt = f.get_tensor("idx"), f.get_tensor("targets")
                want_logits, want_loss = f.get_tensor("logits"), f.get_tensor("loss")
            logits, loss = m(idx, tgt)
            assert logits.shape == want_logits.shape, (logits.shape, want_logits.shape)
            got, want = logits.float().tolist(), want_logits.float().tolist()
            flat = lambda x: [v for a in x for b in a for v in b]
            g, w = flat(got), flat(want)
            err = math.sqrt(sum((a - b) ** 2 for a, b in zip(g, w))) / math.sqrt(sum(b * b for b in w))
            assert err < 1e-5, "bias=%s: logits rel err %.3g" % (bias, err)
            assert abs(loss.item() - want_loss.float().item()) < 1e-5, (loss.item(), want_loss.float().item())
            # the loss alone is the same number, and no targets gives no loss
            assert m.loss(idx, tgt).item() == loss.item()
            assert m(idx)[1] is None


def test_generate_is_seeded_and_keeps_the_prompt():
    require("dlt_gpt_generate")
    with cpu(seed=1):
        m = GPT("tiny")
        a = m.generate([1, 2, 3], 10, temperature=0.9, top_k=5, seed=7)
        b = m.generate([1, 2, 3], 10, temperature=0.9, top_k=5, seed=7)
        c = m.generate([1, 2, 3], 10, temperature=0.9, top_k=5, seed=8)
        assert a == b and a[:3] == [1, 2, 3] and len(a) == 13 and a != c
        assert all(0 <= v < 65 for v in a)
        t = m.generate(dltrain.tensor([[1, 2, 3]]), 10, temperature=0.9, top_k=5, seed=7)
        assert t.shape == (1, 13) and t.tolist()[0] == a


def test_hugging_face_round_trip():
    require("dlt_gpt_save_hf", "dlt_gpt_from_hf")
    with cpu(seed=2):
        m = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, vocab_size=29, block_size=8))
        x = dltrain.tensor([[1, 2, 3, 4]])
        with tempfile.TemporaryDirectory() as d:
            m.save_hf(d)
            assert os.path.exists(os.path.join(d, "config.json"))
            back = GPT.from_hf(d)
            assert back.config == m.config
            assert back(x)[0].tolist() == m(x)[0].tolist()
            other = GPT(m.config)
            assert other(x)[0].tolist() != m(x)[0].tolist()
            other.load_hf(d)
            assert other(x)[0].tolist() == m(x)[0].tolist()
            moved = back.to("cpu")  # rebuilt from its constructor arguments
            assert moved(x)[0].tolist() == m(x)[0].tolist()


def test_nanogpt_optimizer_groups():
    require("dlt_adamw_create_ex")
    with cpu():
        m = GPT("tiny")
        opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
        g = opt.param_groups
        assert len(g) == 2 and g[0]["weight_decay"] == 0.1 and g[1]["weight_decay"] == 0.0
        assert all(p.ndim >= 2 for p in g[0]["params"]) and all(p.ndim < 2 for p in g[1]["params"])
        assert len(g[0]["params"]) + len(g[1]["params"]) == m.num_params()


def test_rng_state_restores_dropout():
    require("dlt_ctx_get_rng_state", "dlt_ctx_set_rng_state")
    ctx = cpu(seed=5)
    with ctx:
        x = dltrain.ones(4096)
        dltrain.functional.dropout(x, 0.5)
        state = ctx.get_rng_state()
        a = dltrain.functional.dropout(x, 0.5).tolist()
        ctx.set_seed(9)
        ctx.set_rng_state(state)
        assert dltrain.functional.dropout(x, 0.5).tolist() == a
        assert state[0] == 5 and state[1] > 0


def test_checkpoint_extra_entries():
    require("dlt_checkpoint_save_ex")
    with cpu():
        m = GPT("tiny")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ckpt.safetensors")
            checkpoint_save(path, m, None, None, 0, 7,
                            extra={"train.iter": dltrain.tensor(7, dtype="i64"),
                                   "train.best_val_loss": dltrain.tensor(1.5, dtype="f32")})
            with SafeTensors(path) as f:
                assert f.get_tensor("train.iter").item() == 7 and f.get_tensor("train.best_val_loss").item() == 1.5
            assert checkpoint_load(path, m) == (0, 7)
            try:
                checkpoint_save(path, m, extra={"iter": dltrain.tensor(1)})
                raise AssertionError("a name outside train. was accepted")
            except dltrain.InvalidArgument as e:
                assert "train." in str(e)
