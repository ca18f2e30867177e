"""Learner-style code for mistakes the grader names since issue 21 (part 4): each is an edit of a reference solution
(``tests/grader_cases/implementations.py``, ``tests/grader_cases/beyond.py``) with the diagnosis key and the text
(``mutant.<text>`` in messages.py) it must get. Before, each of these failed as "match no known mistake"."""
from tests.grader_cases.beyond import REFERENCE as BEYOND
from tests.grader_cases.implementations import REFERENCE as BOOK
from tests.grader_cases.implementations import mutate

REFERENCE = {**BOOK, **BEYOND}


def _replace(src, old, new):
    assert src.count(old) == 1, old
    return src.replace(old, new)


def _softmax_dim(exercise, dim):
    """The reference with its softmax over a fixed ``dim`` instead of dim=-1."""
    src = REFERENCE[exercise]
    if exercise in ("rope", "mla"):  # one softmax call, untagged
        return _replace(src, "-torch.inf), dim=-1))", f"-torch.inf), dim={dim}))")
    return _replace(src, "torch.softmax(scores, dim=-1)", f"torch.softmax(scores, dim={dim})")


_ROPE_FREQ = "inv_freq = 1.0 / self.rope_base ** (torch.arange({}).float() / d)"
_MLA_FREQ = "(torch.arange(0, d, 2).float() / d)"
_MLA_TABLE = "angles = torch.cat([angles, angles], dim=-1)"
_MLA_TURN = "torch.cat([-x2, x1], dim=-1) * angles.sin()"
_ABSORBED_SCORES = "scores = (q_nope @ w_uk) @ c_kv[:, None].transpose(-2, -1)"
_ABSORBED_CTX = "ctx = (w @ c_kv[:, None]) @ w_uv.transpose(-2, -1)"
_VIEWS = {  # the absorbed weight split into heads the wrong way: (text, how W is turned into (nh, hd, dc))
    "mla_absorb_per_head_in_out": "self.{w}.weight.view(self.nh, self.dc, self.hd).transpose(1, 2)",
    "mla_absorb_heads_minor": "self.{w}.weight.view(self.hd, self.nh, self.dc).transpose(0, 1)",
    "mla_absorb_t_reshape": "self.{w}.weight.T.reshape(self.nh, self.hd, self.dc)",
}


def _mla_views():
    cases = []
    for text, view in _VIEWS.items():
        for tags in (("WUK",), ("WUV",), ("WUK", "WUV")):
            edits = {t: f"w_{t[1:].lower()} = " + view.format(w="W_" + t[1:].lower()) for t in tags}
            cases.append((f"mla-{text}-{'+'.join(tags)}", "mla", mutate(REFERENCE["mla"], edits),
                          "mla_absorb_wrong_transpose", text))
    return cases


# (id, exercise, source, diagnosis key, text: messages.py's "mutant.<text>")
CASES = [
    # softmax over a fixed axis: dim=0 (notebook 01's 1-D habit) and dim=1 wherever they are not the keys
    ("self_attention-dim0", "self_attention", _softmax_dim("self_attention", 0), "softmax_wrong_axis",
     "softmax_batch_axis"),
    ("self_attention-dim1", "self_attention", _softmax_dim("self_attention", 1), "softmax_wrong_axis",
     "softmax_fixed_dim1"),
    ("causal-dim0", "causal", _softmax_dim("causal", 0), "softmax_wrong_axis", "softmax_batch_axis"),
    ("wrapper-dim0", "wrapper", _softmax_dim("wrapper", 0), "softmax_wrong_axis", "softmax_batch_axis"),
    ("mha-dim0", "mha", _softmax_dim("mha", 0), "softmax_wrong_axis", "softmax_batch_axis"),
    ("mha_interview-dim0", "mha_interview", _softmax_dim("mha_interview", 0), "softmax_wrong_axis",
     "softmax_batch_axis"),
    ("gqa-dim0", "gqa", _softmax_dim("gqa", 0), "softmax_wrong_axis", "softmax_batch_axis"),
    ("kv_cache-dim0", "kv_cache", _softmax_dim("kv_cache", 0), "softmax_wrong_axis", "softmax_batch_axis"),
    ("kv_cache-dim1", "kv_cache", _softmax_dim("kv_cache", 1), "softmax_wrong_axis", "softmax_heads_axis"),
    ("kv_cache-dim-2", "kv_cache", _softmax_dim("kv_cache", -2), "softmax_wrong_axis", "softmax_wrong_axis"),
    ("rope-dim0", "rope", _softmax_dim("rope", 0), "softmax_wrong_axis", "softmax_batch_axis"),
    ("rope-dim1", "rope", _softmax_dim("rope", 1), "softmax_wrong_axis", "softmax_heads_axis"),
    ("rope-dim-2", "rope", _softmax_dim("rope", -2), "softmax_wrong_axis", "softmax_wrong_axis"),
    ("mla-dim0", "mla", _softmax_dim("mla", 0), "softmax_wrong_axis", "softmax_batch_axis"),
    ("mla-dim-2", "mla", _softmax_dim("mla", -2), "softmax_wrong_axis", "softmax_wrong_axis"),
    # RoPE's exponent: theta_i = base^(-2(i+1)/d), base^(-(2i+1)/d), base^(-i/d)
    ("rope-exponent-shifted", "rope", mutate(REFERENCE["rope"], {"FREQ": _ROPE_FREQ.format("2, d + 2, 2")}),
     "rope_exponent_off_by_one", "rope_exponent_off_by_one"),
    ("rope-exponent-odd", "rope", mutate(REFERENCE["rope"], {"FREQ": _ROPE_FREQ.format("1, d, 2")}),
     "rope_exponent_off_by_one", "rope_exponent_off_by_one"),
    ("rope-exponent-no-two", "rope", mutate(REFERENCE["rope"], {"FREQ": _ROPE_FREQ.format("d // 2")}),
     "rope_exponent_off_by_one", "rope_exponent_no_two"),
    ("mla-exponent-shifted", "mla", _replace(REFERENCE["mla"], _MLA_FREQ, "(torch.arange(2, d + 2, 2).float() / d)"),
     "rope_exponent_off_by_one", "rope_exponent_off_by_one"),
    # one layout's angle table with the other's pairs
    ("rope-pair-angles-on-half", "rope",
     mutate(REFERENCE["rope"], {"TABLE": "angles = angles.repeat_interleave(2, dim=-1)"}),
     "rope_layouts_mixed", "rope_pair_angles_on_half"),
    ("rope-half-angles-on-pairs", "rope",
     mutate(REFERENCE["rope"], {"TURN": "turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)"}),
     "rope_layouts_mixed", "rope_half_angles_on_pairs"),
    ("mla-pair-angles-on-half", "mla",
     _replace(REFERENCE["mla"], _MLA_TABLE, "angles = angles.repeat_interleave(2, dim=-1)"),
     "rope_layouts_mixed", "rope_pair_angles_on_half"),
    ("mla-half-angles-on-pairs", "mla",
     _replace(REFERENCE["mla"], _MLA_TURN,
              "torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2) * angles.sin()"),
     "rope_layouts_mixed", "rope_half_angles_on_pairs"),
    # MLA: the absorbed weights split into heads the wrong way (other than the catalogued (in, out) reading)
    *_mla_views(),
    # MLA: RoPE rotated into the absorbed latents (the absorbed query; and c_kv for the scores; for the values too)
    ("mla-rope-absorbed-query", "mla",
     _replace(REFERENCE["mla"], _ABSORBED_SCORES,
              "scores = self.rope(q_nope @ w_uk, positions) @ c_kv[:, None].transpose(-2, -1)"),
     "mla_rope_on_absorbed_latents", "mla_rope_on_absorbed_latents"),
    ("mla-rope-absorbed-latents", "mla",
     _replace(REFERENCE["mla"], _ABSORBED_SCORES,
              "scores = self.rope(q_nope @ w_uk, positions) "
              "@ self.rope(c_kv, torch.arange(N))[:, None].transpose(-2, -1)"),
     "mla_rope_on_absorbed_latents", "mla_rope_on_absorbed_latents"),
    ("mla-rope-absorbed-all", "mla",
     _replace(_replace(REFERENCE["mla"], _ABSORBED_SCORES,
                       "c_rot = self.rope(c_kv, torch.arange(N)); "
                       "scores = self.rope(q_nope @ w_uk, positions) @ c_rot[:, None].transpose(-2, -1)"),
              _ABSORBED_CTX, "ctx = (w @ c_rot[:, None]) @ w_uv.transpose(-2, -1)"),
     "mla_rope_on_absorbed_latents", "mla_rope_on_absorbed_latents"),
]
