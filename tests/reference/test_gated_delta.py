"""The gated delta rule (notebook 16): Gated DeltaNet and KDA, recurrent and chunked, against an independent
recurrence in float64, on shapes that expose bugs; against Hugging Face's torch fallbacks (and fla's naive
references) where those libraries are installed; and bad input refused with a clear error.

The independent recurrence is written the papers' way round, S in R^{V x K}, one (batch, head) at a time, with the
transition as a matrix: S_t = S_{t-1} Diag(alpha_t) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t
(Gated DeltaNet, Yang et al. 2025, eq. 10; KDA, Kimi Linear 2025, in the transposed orientation). The tests take
their cases as arguments so that tests/reference/test_gated_delta_mutants.py can run them against broken references.
"""

import importlib
import inspect
import math
import re
import warnings

import pytest
import torch

from course_utils import chunk_gated_delta_rule, chunk_kda, l2norm, recurrent_gated_delta_rule, recurrent_kda


def paper_recurrence(q, k, v, g, beta, scale=None, initial_state=None):
    """Float64, loops over batch, heads and tokens; returns (o [B, T, HV, V], final state [B, HV, K, V])."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    b_size, t_size, h_size, dk = q.shape
    hv_size, dv = v.shape[2], v.shape[3]
    scale = 1 / math.sqrt(dk) if scale is None else scale
    out = torch.zeros(b_size, t_size, hv_size, dv, dtype=torch.float64)
    final = torch.zeros(b_size, hv_size, dk, dv, dtype=torch.float64)
    eye = torch.eye(dk, dtype=torch.float64)
    for b in range(b_size):
        for h in range(hv_size):
            qk_head = h // (hv_size // h_size)  # value heads h share the query/key head h // (HV / H)
            s = torch.zeros(dv, dk, dtype=torch.float64)
            if initial_state is not None:
                s = initial_state[b, h].double().T.clone()
            for t in range(t_size):
                kt, qt = k[b, t, qk_head], q[b, t, qk_head] * scale
                alpha = g[b, t, h].exp() * torch.ones(dk, dtype=torch.float64)  # scalar (GDN) or per channel (KDA)
                transition = torch.diag(alpha) @ (eye - beta[b, t, h] * torch.outer(kt, kt))
                s = s @ transition + beta[b, t, h] * torch.outer(v[b, t, h], kt)
                out[b, t, h] = s @ qt
            final[b, h] = s.T
    return out, final


def make_inputs(b, t, h, dk, dv, hv=None, per_channel=False, dtype=torch.float64, seed=0, strong_decay=False):
    """Random inputs with L2-normalised keys (as the models feed them), beta in (0, 1), g <= 0."""
    gen = torch.Generator().manual_seed(seed)
    hv = hv or h
    q = torch.randn(b, t, h, dk, generator=gen, dtype=dtype)
    k = l2norm(torch.randn(b, t, h, dk, generator=gen, dtype=dtype))
    v = torch.randn(b, t, hv, dv, generator=gen, dtype=dtype)
    gate = (b, t, hv, dk) if per_channel else (b, t, hv)
    g = -torch.rand(*gate, generator=gen, dtype=dtype) * (3.0 if strong_decay else 0.3)
    beta = torch.rand(b, t, hv, generator=gen, dtype=dtype)
    state = torch.randn(b, hv, dk, dv, generator=gen, dtype=dtype)
    return q, k, v, g, beta, state


FORMS = {
    "gdn-recurrent": (recurrent_gated_delta_rule, False, None),
    "gdn-chunk": (chunk_gated_delta_rule, False, "chunk"),
    "kda-recurrent": (recurrent_kda, True, None),
    "kda-chunk": (chunk_kda, True, "chunk"),
}


def call(form, q, k, v, g, beta, chunk_size=None, **kw):
    fn, _, chunked = FORMS[form]
    if chunked:
        kw["chunk_size"] = chunk_size or 4
    return fn(q, k, v, g, beta, **kw)


# (B, T, H, HV, K, V, chunk): T not divisible by the chunk, T = 1, T < chunk, T = a multiple, HV > H, batch > 1
SHAPES = [
    (2, 37, 3, 3, 8, 5, 16),
    (1, 1, 2, 2, 4, 4, 16),
    (3, 5, 1, 1, 6, 3, 8),
    (2, 24, 2, 2, 8, 8, 8),
    (2, 19, 2, 4, 8, 6, 4),
    (1, 12, 1, 1, 4, 4, 1),
]


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}T{}H{}HV{}K{}V{}C{}".format(*s))
@pytest.mark.parametrize("form", list(FORMS))
def test_equals_the_paper_recurrence_in_float64(form, shape, with_state):
    b, t, h, hv, dk, dv, c = shape
    q, k, v, g, beta, state = make_inputs(b, t, h, dk, dv, hv, per_channel=FORMS[form][1])
    initial = state if with_state else None
    out, final = call(form, q, k, v, g, beta, chunk_size=c, initial_state=initial, output_final_state=True)
    expected_out, expected_final = paper_recurrence(q, k, v, g, beta, initial_state=initial)
    assert out.shape == (b, t, hv, dv) and final.shape == (b, hv, dk, dv)
    assert out.dtype == final.dtype == torch.float64
    torch.testing.assert_close(out, expected_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(final, expected_final, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("form", list(FORMS))
def test_strong_decay_and_a_long_chunk_stay_finite(form):
    """Gates near exp(-3) per token over a chunk of 64: the chunk's cumulative decay underflows toward 0, never
    overflows (only differences gamma_i - gamma_j with j <= i are exponentiated)."""
    q, k, v, g, beta, state = make_inputs(2, 150, 2, 8, 4, per_channel=FORMS[form][1], strong_decay=True)
    out, final = call(form, q, k, v, g, beta, chunk_size=64, initial_state=state, output_final_state=True)
    expected_out, expected_final = paper_recurrence(q, k, v, g, beta, initial_state=state)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    torch.testing.assert_close(out, expected_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(final, expected_final, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("form", list(FORMS))
def test_a_sequence_split_in_two_equals_one_pass(form):
    """Prefill then decode: the final state of the first part is the initial state of the second."""
    q, k, v, g, beta, _ = make_inputs(2, 21, 2, 8, 4, per_channel=FORMS[form][1])
    whole, whole_state = call(form, q, k, v, g, beta, chunk_size=8, output_final_state=True)
    first, state = call(form, *(x[:, :13] for x in (q, k, v, g, beta)), chunk_size=8, output_final_state=True)
    second, last_state = call(
        form, *(x[:, 13:] for x in (q, k, v, g, beta)), chunk_size=8, initial_state=state, output_final_state=True
    )
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(last_state, whole_state, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("chunk_size", [1, 3, 8, 64])
def test_chunked_equals_recurrent_for_every_chunk_size(chunk_size):
    q, k, v, g, beta, state = make_inputs(2, 29, 2, 8, 8, hv=4)
    rec, rec_state = recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=True)
    chunk, chunk_state = chunk_gated_delta_rule(
        q, k, v, g, beta, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    torch.testing.assert_close(chunk, rec, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(chunk_state, rec_state, atol=1e-12, rtol=1e-12)


def test_kda_with_one_rate_per_head_is_gated_deltanet():
    q, k, v, g, beta, state = make_inputs(2, 17, 2, 8, 4)
    per_channel = g[..., None].expand(*g.shape, 8)
    for gdn, kda in ((recurrent_gated_delta_rule, recurrent_kda), (chunk_gated_delta_rule, chunk_kda)):
        expected = gdn(q, k, v, g, beta, initial_state=state, output_final_state=True)
        got = kda(q, k, v, per_channel, beta, initial_state=state, output_final_state=True)
        torch.testing.assert_close(got[0], expected[0], atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(got[1], expected[1], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("form", list(FORMS))
def test_final_state_only_when_asked_and_inputs_untouched(form):
    q, k, v, g, beta, state = make_inputs(1, 6, 1, 4, 4, per_channel=FORMS[form][1])
    before = [x.clone() for x in (q, k, v, g, beta, state)]
    out, final = call(form, q, k, v, g, beta, initial_state=state)
    assert final is None and out.shape == (1, 6, 1, 4)
    for x, y in zip(before, (q, k, v, g, beta, state), strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("form", list(FORMS))
def test_float32_and_bfloat16_close_to_float64(form):
    q, k, v, g, beta, state = make_inputs(2, 40, 2, 16, 8, per_channel=FORMS[form][1])
    truth, truth_state = call(form, q, k, v, g, beta, chunk_size=16, initial_state=state, output_final_state=True)
    for dtype, atol in ((torch.float32, 1e-5), (torch.bfloat16, 0.1)):
        lowered = [x.to(dtype) for x in (q, k, v, g, beta)]
        out, final = call(form, *lowered, chunk_size=16, initial_state=state.float(), output_final_state=True)
        assert out.dtype == dtype and final.dtype == torch.float32  # the state is kept in float32
        torch.testing.assert_close(out.double(), truth, atol=atol, rtol=atol)
        torch.testing.assert_close(final.double(), truth_state, atol=atol, rtol=atol)


def test_qk_l2norm_in_kernel_and_scale():
    q, k, v, g, beta, _ = make_inputs(2, 9, 2, 8, 4)
    k = k * 3  # not unit length: the flag normalises
    for fn in (recurrent_gated_delta_rule, chunk_gated_delta_rule):
        flagged, _ = fn(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
        by_hand, _ = fn(l2norm(q), l2norm(k), v, g, beta)
        torch.testing.assert_close(flagged, by_hand, atol=1e-12, rtol=1e-12)
        scaled, _ = fn(q, l2norm(k), v, g, beta, scale=0.7)
        expected, _ = paper_recurrence(q, l2norm(k), v, g, beta, scale=0.7)
        torch.testing.assert_close(scaled, expected, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(l2norm(k).norm(dim=-1), torch.ones(2, 9, 2, dtype=torch.float64), atol=1e-6, rtol=0)


def test_zero_tokens_return_the_initial_state():
    q, k, v, g, beta, state = make_inputs(1, 0, 2, 4, 4)
    for form in ("gdn-recurrent", "gdn-chunk"):
        out, final = call(form, q, k, v, g, beta, initial_state=state, output_final_state=True)
        assert out.shape == (1, 0, 2, 4)
        torch.testing.assert_close(final, state, atol=0, rtol=0)


# ------------------------------------------------------------------------------------------ other implementations


def _quietly(fn, *args, **kwargs):
    """Hugging Face's torch function itself: where fla is installed its decorator would call fla's kernel instead."""
    fn = inspect.unwrap(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


HF_GDN = "transformers.models.qwen3_next.modeling_qwen3_next"
HF_KDA = "transformers.models.kimi_linear.modeling_kimi_linear"


def _import_or_skip(module):
    try:
        return importlib.import_module(module)
    except ImportError as err:  # transformers missing, or too old for the model
        pytest.skip(f"{module} is not importable here ({err}); the course installs neither transformers nor fla")


@pytest.mark.parametrize("shape", [(2, 37, 2, 2, 16, 8, 16), (1, 1, 2, 4, 8, 8, 4), (2, 20, 2, 4, 8, 8, 8)])
def test_gated_deltanet_equals_hugging_face_fallbacks(shape):
    """Hugging Face's torch_recurrent_gated_delta_rule and torch_chunk_gated_delta_rule (Qwen3-Next), which
    compute in float32: our float32 result within float32 rounding, on GVA shapes too."""
    hf = _import_or_skip(HF_GDN)
    b, t, h, hv, dk, dv, c = shape
    q, k, v, g, beta, state = (x.float() for x in make_inputs(b, t, h, dk, dv, hv))
    ours = recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=True)
    theirs = _quietly(hf.torch_recurrent_gated_delta_rule, q, k, v, g, beta, state, True)
    ours_chunk = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=c, initial_state=state, output_final_state=True)
    theirs_chunk = _quietly(
        hf.torch_chunk_gated_delta_rule, q, k, v, g, beta, chunk_size=c, initial_state=state, output_final_state=True
    )
    for got, expected in ((ours, theirs), (ours_chunk, theirs_chunk)):
        torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[1], expected[1], atol=1e-5, rtol=1e-5)
    flagged = chunk_gated_delta_rule(q, 3 * k, v, g, beta, chunk_size=c, use_qk_l2norm_in_kernel=True)[0]
    theirs_flagged = _quietly(hf.torch_chunk_gated_delta_rule, q, 3 * k, v, g, beta, c, None, False, True)[0]
    torch.testing.assert_close(flagged, theirs_flagged, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 37, 2, 16, 8, 16), (1, 1, 2, 8, 8, 4)])
def test_kda_equals_hugging_face_fallbacks(shape):
    """Hugging Face's recurrent_kimi_delta_attention and chunk_kimi_delta_attention (Kimi Linear)."""
    hf = _import_or_skip(HF_KDA)
    b, t, h, dk, dv, c = shape
    q, k, v, g, beta, state = (x.float() for x in make_inputs(b, t, h, dk, dv, per_channel=True))
    pairs = [
        (
            recurrent_kda(q, k, v, g, beta, initial_state=state, output_final_state=True),
            _quietly(hf.recurrent_kimi_delta_attention, q, k, v, g, beta, initial_state=state, output_final_state=True),
        ),
        (
            chunk_kda(q, k, v, g, beta, initial_state=state, output_final_state=True, chunk_size=c),
            _quietly(hf.chunk_kimi_delta_attention, q, k, v, g, beta, c, initial_state=state, output_final_state=True),
        ),
    ]
    for got, expected in pairs:
        torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[1], expected[1], atol=1e-5, rtol=1e-5)


def test_equals_fla_naive_references():
    """fla's own pure-PyTorch references, where flash-linear-attention is installed (it needs triton to import)."""
    gdn = _import_or_skip("fla.ops.gated_delta_rule.naive")
    kda = _import_or_skip("fla.ops.kda.naive")
    q, k, v, g, beta, state = (x.float() for x in make_inputs(2, 32, 2, 16, 8))
    ours = chunk_gated_delta_rule(q, k, v, g, beta, 16, None, state, True)  # fla's positional order
    torch.testing.assert_close(ours, gdn.naive_chunk_gated_delta_rule(q, k, v, g, beta, 16, None, state, True))
    ours = recurrent_gated_delta_rule(q, k, v, g, beta, None, state, True)
    theirs = gdn.naive_recurrent_gated_delta_rule(q, k, v, beta, g, None, state, True)  # beta before g there
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    q, k, v, g, beta, state = (x.float() for x in make_inputs(2, 32, 2, 16, 8, per_channel=True))
    ours = chunk_kda(q, k, v, g, beta, None, state, True, 16)
    torch.testing.assert_close(ours, kda.naive_chunk_kda(q, k, v, g, beta, None, state, True, 16))
    ours = recurrent_kda(q, k, v, g, beta, None, state, True)
    torch.testing.assert_close(ours, kda.naive_recurrent_kda(q, k, v, g, beta, None, state, True))


# ---------------------------------------------------------------------------------------------------- bad input


def _good():
    return make_inputs(1, 5, 2, 4, 3)


BAD = [
    ("q as (B, H, T, d) missing a batch axis", lambda q, k, v, g, b: (q[0], k, v, g, b), "shape [B, T, heads"),
    ("k of another shape", lambda q, k, v, g, b: (q, k[..., :3], v, g, b), "q and k must have the same shape"),
    ("v with another T", lambda q, k, v, g, b: (q, k, v[:, :4], g, b), "v must have shape [B=1, T=5"),
    ("HV not a multiple of H", lambda q, k, v, g, b: (q, k, v[:, :, :1].expand(1, 5, 3, 3), g, b), "multiple"),
    ("g per channel to GDN", lambda q, k, v, g, b: (q, k, v, g[..., None].expand(1, 5, 2, 4), b), "g (one log-decay"),
    ("beta of g's length", lambda q, k, v, g, b: (q, k, v, g, b[..., :1]), "beta must have shape"),
    ("beta and g swapped", lambda q, k, v, g, b: (q, k, v, b, g), "must be <= 0"),
    ("alpha passed as g", lambda q, k, v, g, b: (q, k, v, g.exp(), b), "Did you pass alpha"),
    ("NaN in g", lambda q, k, v, g, b: (q, k, v, g.masked_fill(g < g.mean(), float("nan")), b), "not NaN"),
    ("integer keys", lambda q, k, v, g, b: (q, k.long(), v, g, b), "floating"),
    ("mixed dtypes", lambda q, k, v, g, b: (q, k, v.float(), g, b), "share one dtype"),
    ("a list", lambda q, k, v, g, b: (q.tolist(), k, v, g, b), "torch.Tensor"),
]


@pytest.mark.parametrize("what, edit, message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_a_clear_error(what, edit, message):
    q, k, v, g, beta, _ = _good()
    for fn in (recurrent_gated_delta_rule, chunk_gated_delta_rule):
        with pytest.raises(ValueError, match=re.escape(message)):
            fn(*edit(q, k, v, g, beta))


def test_bad_state_and_chunk_size():
    q, k, v, g, beta, state = _good()
    with pytest.raises(ValueError, match=re.escape("initial_state must have shape [B, HV, K, V] = [1, 2, 4, 3]")):
        recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=state.transpose(-1, -2))
    for bad in (0, 2.0, True, None):
        with pytest.raises(ValueError, match="chunk_size must be a positive int"):
            chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=bad)
    with pytest.raises(ValueError, match=re.escape("g (one log-decay per key channel) must have shape [1, 5, 2, 4]")):
        recurrent_kda(q, k, v, g, beta)


def test_a_chinese_learner_reads_the_error_in_chinese():
    from course_utils import lang

    q, k, v, g, beta, _ = _good()
    try:
        for language, wanted in (("en", "Did you pass alpha"), ("zh", "是不是把 alpha 本身")):
            lang.set_language(language)
            with pytest.raises(ValueError, match=wanted):
                chunk_gated_delta_rule(q, k, v, g.exp(), beta)
    finally:
        lang.set_language(None)
