"""The capstone's GPT: shapes, KV-cached generation equals recomputation, SDPA equals the reference path,
checkpoints, head ablation, K/V mean-pooling, and clear errors for bad input."""

import re

import pytest
import torch

from course_utils import GroupedQueryAttention, mha_to_gqa
from course_utils.capstone.gpt import GPT, GPTConfig, ablate_heads, head_outputs, pool_kv_heads

V, CTX = 11, 12


def make(randomize=None, **kw):
    cfg = dict(vocab_size=V, context_length=CTX, emb_dim=24, n_heads=6, n_layers=2, mlp_hidden=0)
    model = GPT(GPTConfig(**{**cfg, **kw})).double().eval()
    if randomize is not None:  # larger weights than GPT-2's init: peaked attention, so mistakes show
        randomize(model, scale=0.3)
    return model


def tokens(batch=2, num=7, seed=0):
    return torch.randint(0, V, (batch, num), generator=torch.Generator().manual_seed(seed))


ARCHS = [
    pytest.param({}, id="attention-only-mha"),
    pytest.param({"n_kv_groups": 2}, id="gqa"),
    pytest.param({"n_kv_groups": 1, "mlp_hidden": 16}, id="mqa-mlp"),
    pytest.param({"n_layers": 3, "mlp_hidden": 32, "qkv_bias": True}, id="3-layers-mlp-bias"),
    pytest.param({"positions": "none"}, id="no-positions"),
]


@pytest.mark.parametrize("arch", ARCHS)
def test_shapes_and_weights(arch, randomize):
    model = make(randomize, **arch)
    logits, weights = model(tokens(3, 5), return_weights=True)
    assert logits.shape == (3, 5, V)
    assert len(weights) == model.config.n_layers
    for w in weights:
        assert w.shape == (3, 6, 5, 5)
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 6, 5, dtype=w.dtype))
        assert torch.all(w.triu(1) == 0)  # causal
    assert model.out_head.weight is model.tok_emb.weight  # tied


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("chunks", [[4, 1, 1, 1], [2, 3, 2]], ids=["prefill+tokens", "chunks"])
@pytest.mark.parametrize("preallocate", [False, True])
def test_cached_forward_equals_full_forward(arch, chunks, preallocate, randomize, close):
    model = make(randomize, **arch)
    idx = tokens(2, sum(chunks))
    caches = model.make_caches(2, preallocate=preallocate, max_len=sum(chunks))
    outs, start = [], 0
    for n in chunks:
        outs.append(model(idx[:, start : start + n], caches))
        start += n
    close(torch.cat(outs, dim=1), model(idx))
    assert [c.seq_len for c in caches] == [start] * model.config.n_layers


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("cache", ["growing", "preallocated"])
def test_cached_generate_equals_uncached(arch, cache, randomize):
    model = make(randomize, **arch)
    prompt = tokens(2, 3)
    greedy = model.generate(prompt, 9, cache=None)
    assert greedy.shape == (2, CTX) and torch.equal(greedy[:, :3], prompt)
    assert torch.equal(model.generate(prompt, 9, cache=cache), greedy)
    sampled = [
        model.generate(prompt, 9, temperature=1.5, top_k=5, cache=c, generator=torch.Generator().manual_seed(7))
        for c in (None, cache)
    ]
    assert torch.equal(*sampled)
    assert torch.equal(model.generate(prompt, 9, temperature=0.7, top_k=1, cache=cache), greedy)  # top-1 = argmax


@pytest.mark.parametrize("arch", ARCHS[:3])
def test_sdpa_path_equals_reference_path(arch, randomize, close):
    model = make(randomize, **arch)
    idx = tokens(2, CTX)
    reference = model(idx)
    model.use_sdpa = True
    assert model.use_sdpa and all(b.attn.use_sdpa for b in model.blocks)
    close(model(idx), reference)
    assert torch.equal(model.generate(idx[:, :4], 8), make_like(model, use_sdpa=False).generate(idx[:, :4], 8))


def make_like(model, **changes):
    other = GPT(GPTConfig(**{**model.config.__dict__, **changes})).double().eval()
    other.load_state_dict(model.state_dict())
    return other


def test_sampling_follows_the_temperature(randomize):
    model = make(randomize)
    prompt = tokens(1, 2).expand(400, 2)
    hot = model.generate(prompt, 1, temperature=5.0, generator=torch.Generator().manual_seed(0))[:, -1]
    cold = model.generate(prompt, 1, temperature=0.05, generator=torch.Generator().manual_seed(0))[:, -1]
    assert len(set(hot.tolist())) > len(set(cold.tolist())) >= 1


def test_checkpoint_round_trip(tmp_path, randomize):
    model = make(randomize, n_kv_groups=3, mlp_hidden=8)
    path = tmp_path / "m.pt"
    torch.save(model.checkpoint(note="x"), path)
    loaded = GPT.from_checkpoint(path).double().eval()
    assert loaded.config == model.config and loaded.out_head.weight is loaded.tok_emb.weight
    assert torch.equal(loaded(tokens()), model(tokens()))
    assert torch.load(path, weights_only=True)["meta"] == {"note": "x"}
    state = model.checkpoint()
    state["state_dict"].pop("blocks.0.attn.W_key.weight")
    with pytest.raises(ValueError, match="missing .*blocks.0.attn.W_key.weight"):
        GPT.from_checkpoint(state)


def test_ablating_a_head_zeroes_its_slice_of_out_proj(randomize, close):
    model = make(randomize)
    idx = tokens()
    by_weights = make_like(model)
    with torch.no_grad():
        by_weights.blocks[1].attn.out_proj.weight[:, 2 * 4 : 3 * 4] = 0.0  # head 2 of 6, head_dim 4
    with ablate_heads(model, [(1, 2)]):
        close(model(idx), by_weights(idx))
    close(model(idx), make_like(model)(idx))  # the hook is gone
    with pytest.raises(ValueError, match=re.escape("head (2, 0) does not exist: layers 0..1, heads 0..5")):
        with ablate_heads(model, [(2, 0)]):
            pass


def test_mean_ablation_replaces_a_head_by_a_value_through_out_proj(randomize, close):
    model = make(randomize)
    idx = tokens()
    outputs = head_outputs(model, idx)
    assert [tuple(o.shape) for o in outputs] == [(2, 7, 6, 4)] * 2  # (B, T, heads, head_dim) per layer
    mean = outputs[1][:, :, 2].mean(dim=(0, 1))  # (head_dim,)
    by_bias = make_like(model)  # a constant head output is a constant added by out_proj: fold it into the bias
    with torch.no_grad():
        out_proj = by_bias.blocks[1].attn.out_proj
        out_proj.bias += out_proj.weight[:, 2 * 4 : 3 * 4] @ mean
        out_proj.weight[:, 2 * 4 : 3 * 4] = 0.0
    with ablate_heads(model, [(1, 2)], replace_with={(1, 2): mean}):
        close(model(idx), by_bias(idx))
    with ablate_heads(model, [(1, 2)], replace_with={(1, 2): outputs[1][:, :, 2]}):  # its own output: no change
        close(model(idx), make_like(model)(idx))
    with pytest.raises(ValueError, match=re.escape("replace_with names heads that are not ablated: [(0, 1)]")):
        with ablate_heads(model, [(1, 2)], replace_with={(0, 1): mean}):
            pass


def test_pooling_kv_heads(randomize, close):
    model = make(randomize, qkv_bias=True)
    idx = tokens()
    close(pool_kv_heads(model, 6)(idx), model(idx))  # groups of one head: the same model
    gqa = pool_kv_heads(model, 2)
    assert gqa.config.n_kv_groups == 2 and model.config.n_kv_groups == 6
    # independent formulation: the pooled layer's keys are the mean of the original heads' keys
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    keys = model.blocks[0].attn.W_key(x).view(2, 5, 2, 3, 4).mean(dim=3).reshape(2, 5, 8)
    close(gqa.blocks[0].attn.W_key(x), keys)
    close(gqa.blocks[0].attn.W_query(x), model.blocks[0].attn.W_query(x))
    # MHA -> GQA(2) -> MQA equals MHA -> MQA
    close(pool_kv_heads(gqa, 1)(idx), pool_kv_heads(model, 1)(idx))


def test_mha_to_gqa_checks_its_groups():
    with pytest.raises(ValueError, match=re.escape("the K/V heads (4) and num_kv_groups (3)")):
        mha_to_gqa(GroupedQueryAttention(8, 8, 4, 0.0, 4, 4), 3)


# ---------------------------------------------------------------- errors


def test_context_overflow():
    model = make()
    with pytest.raises(ValueError, match=re.escape("13 tokens exceed context_length=12")):
        model(tokens(1, 13))
    caches = model.make_caches(1)
    model(tokens(1, 10), caches)
    with pytest.raises(ValueError, match=re.escape("10 cached + 3 tokens exceed context_length=12")):
        model(tokens(1, 3), caches)
    with pytest.raises(
        ValueError, match=re.escape("prompt of 5 tokens + max_new_tokens=8 = 13 exceed context_length=12")
    ):
        model.generate(tokens(1, 5), 8)


@pytest.mark.parametrize(
    "bad,message",
    [
        (torch.tensor([1, 2, 3]), "add a batch axis"),
        (torch.ones(1, 3), "integer token ids"),
        (torch.tensor([[1, V]]), f"token ids must lie in [0, {V - 1}], got [1, {V}]"),
        (torch.zeros(1, 0, dtype=torch.long), "no tokens"),
        ([[1, 2]], "must be a (batch, num_tokens) tensor"),
    ],
)
def test_bad_token_ids(bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()(bad)


def test_bad_generate_arguments():
    model = make()
    for kwargs, message in [
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"top_k": 0}, "top_k must lie in [1, vocab_size=11]"),
        ({"cache": "static"}, "cache must be 'growing', 'preallocated' or None"),
        ({"max_new_tokens": -1}, "max_new_tokens must be a non-negative int"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            model.generate(tokens(1, 2), **{"max_new_tokens": 2, **kwargs})


def test_other_errors():
    model = make()
    with pytest.raises(ValueError, match="got 1 caches for 2 layers"):
        model(tokens(), model.make_caches(2)[:1])
    model.use_sdpa = True
    with pytest.raises(ValueError, match="return_weights=True needs the reference path"):
        model(tokens(), return_weights=True)
    with pytest.raises(ValueError, match=re.escape("emb_dim (24) and n_heads (5)")):
        GPTConfig(V, CTX, emb_dim=24, n_heads=5)
    with pytest.raises(ValueError, match=re.escape("n_heads (6) and n_kv_groups (4)")):
        GPTConfig(V, CTX, emb_dim=24, n_heads=6, n_kv_groups=4)
    with pytest.raises(ValueError, match="positions='rope'; known: learned, none"):
        GPTConfig(V, CTX, positions="rope")
    with pytest.raises(ValueError, match="vocab_size must be a positive int"):
        GPTConfig(0, CTX)
    with pytest.raises(ValueError, match="unknown GPTConfig fields"):
        GPTConfig.from_dict({"vocab_size": V, "context_length": CTX, "d_model": 8})
