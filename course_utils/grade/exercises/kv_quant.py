"""Exercise 17b: ``kivi_quantize(keys, values, bits, group_size, residual) -> (keys_hat, values_hat)``, KIVI's
quantised KV cache after T tokens, dequantised (notebook 17): the keys per channel in groups of ``group_size``
consecutive tokens, the values per token in groups of ``group_size`` consecutive channels, both asymmetric
(``code = round((x - min) / scale)``, ``scale = (max - min) / (2^bits - 1)``, back as ``code * scale + min``), a
group whose numbers are all equal coming back exactly; the first ``T - T % residual`` keys and ``T - residual``
values quantised, the rest returned as they are. A function returning a pair, graded on the two dequantised tensors
themselves, every element (``read_back`` names them ``keys_hat`` and ``values_hat``), not on an attention output
that could hide a wrong group.

The reference computation and each misconception are the flags of ``QuantVariant``. The cases are float64 and drawn
so that no number lies within a margin of a rounding boundary (x.5 steps) for the reference and every mistake, so
that a learner who divides or multiplies in another order rounds as the reference does. Every quantised span is a
whole number of groups along either axis, so that a mistake that groups the other axis runs, and is named.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..kinds.function import Call
from ..kit import Mistake, case_titles, draw_seed, mutant
from ..registry import Exercise
from ..types import Case

# ---------------------------------------------------------------------------------------------
# the reference computation, its mistakes as flags

MARGIN = 1e-9  # the smallest distance (in steps, float64 cases) of a normalised number from a rounding boundary


@dataclass(frozen=True)
class QuantVariant:
    key_axis: str = "channel"  # channel (groups of tokens) | token (groups of channels, as the values)
    value_axis: str = "token"  # token | channel (groups of tokens, as the keys)
    window: str = "kivi"  # kivi | none (every token quantised) | last (the last `residual` keys kept, as values)
    groups: str = "consecutive"  # consecutive | strided (member i of group g is element g + i * num_groups) |
    # swapped (the axis split as (group_size, n // group_size): groups of n // group_size consecutive elements)
    zero_range: str = "guarded"  # guarded (scale 1, codes 0) | nan (divided by a zero scale)
    zero_point: str = "ok"  # ok | not_added (code * scale) | not_subtracted (round(x / scale) clamped, + min)


def _groups(x, along, group_size, strided, swapped=False):
    """x with axis ``along`` split into groups of ``group_size``: (..., G, size, ...) with the members on the axis
    after the group index; strided: element g + i * G is member i of group g (a view with the axes swapped)."""
    along = along % x.ndim
    n = x.shape[along]
    if strided:
        return x.unflatten(along, (group_size, n // group_size)).transpose(along, along + 1)
    if swapped:
        return x.unflatten(along, (group_size, n // group_size))
    return x.unflatten(along, (n // group_size, group_size))


def fake_quantize(x, bits, along, group_size, v: QuantVariant):
    """x quantised in groups along ``along`` and dequantised, with the variant's mistakes."""
    strided = v.groups == "strided"
    g = _groups(x, along, group_size, strided, v.groups == "swapped")
    axis = (along % x.ndim) + 1
    levels = 2**bits - 1
    low, high = g.amin(axis, keepdim=True), g.amax(axis, keepdim=True)
    scale = (high - low) / levels
    if v.zero_range == "guarded":
        scale = torch.where(high > low, scale, torch.ones_like(scale))
    if v.zero_point == "not_subtracted":
        codes = torch.round(g / scale).clamp(0, levels)
    else:
        codes = torch.round((g - low) / scale).clamp(0, levels)
    out = codes * scale + (0 if v.zero_point == "not_added" else low)
    if strided:
        out = out.transpose(axis - 1, axis)
    return out.reshape(x.shape)


def normalised(x, bits, along, group_size, v: QuantVariant):
    """The numbers the variant rounds, (x - min) / scale (or x / scale), for the margin check."""
    strided = v.groups == "strided"
    g = _groups(x, along, group_size, strided, v.groups == "swapped")
    axis = (along % x.ndim) + 1
    low, high = g.amin(axis, keepdim=True), g.amax(axis, keepdim=True)
    scale = torch.where(high > low, (high - low) / (2**bits - 1), torch.ones_like(high))
    return g / scale if v.zero_point == "not_subtracted" else (g - low) / scale


def split(t, residual, v: QuantVariant):
    """(keys quantised, values quantised) after t tokens."""
    values = max(0, t - residual)
    if v.window == "none":
        return t, t
    if v.window == "last":
        return values, values
    return t - t % residual, values


def kivi_forward(args, v: QuantVariant):
    keys, values, bits, group_size, residual = args
    n_k, n_v = split(keys.shape[2], residual, v)
    k_hat, v_hat = keys.clone(), values.clone()
    if n_k:
        along = -2 if v.key_axis == "channel" else -1
        k_hat[:, :, :n_k] = fake_quantize(keys[:, :, :n_k], bits, along, group_size, v)
    if n_v:
        along = -1 if v.value_axis == "token" else -2
        v_hat[:, :, :n_v] = fake_quantize(values[:, :, :n_v], bits, along, group_size, v)
    return k_hat, v_hat


def rounding_safe(args, variants) -> bool:
    """No variant rounds a number within MARGIN of x.5."""
    keys, values, bits, group_size, residual = args
    for v in variants:
        n_k, n_v = split(keys.shape[2], residual, v)
        for x, n, along in (
            (keys, n_k, -2 if v.key_axis == "channel" else -1),
            (values, n_v, -1 if v.value_axis == "token" else -2),
        ):
            if not n or x[:, :, :n].shape[along] % group_size:
                continue
            z = normalised(x[:, :, :n], bits, along, group_size, v)
            frac = (z - z.floor() - 0.5).abs()
            if bool((frac[torch.isfinite(frac)] < MARGIN).any()):
                return False
    return True


def draw_args(g, b, h, t, d, bits, group_size, residual, constant=False, tries=100):
    """float64 keys (with a fixed offset per channel, as trained keys have) and values, drawn until no variant rounds
    a number within MARGIN of x.5. ``constant``: a key channel constant over the second group of tokens and a value
    token of zeros (a padded token)."""
    variants = [QuantVariant()] + [m.variant for m in mutants() if m.variant.zero_range == "guarded"]
    for _ in range(tries):
        keys = torch.randn(b, h, t, d, generator=g, dtype=torch.float64) * 2
        keys = keys + torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64) * 3
        values = torch.randn(b, h, t, d, generator=g, dtype=torch.float64)
        if constant:
            keys[:, :, group_size : 2 * group_size, 1] = 0.25
            values[:, :, 2] = 0.0
        args = (keys, values, bits, group_size, residual)
        if rounding_safe(args, variants):
            return args
    raise RuntimeError("no case clear of the rounding boundaries in 100 draws")  # float64: never met


def quant_case(name, g, b, h, t, d, bits, group_size, residual, constant=False):
    args = draw_args(g, b, h, t, d, bits, group_size, residual, constant)
    ctor = {"bits": bits, "group_size": group_size, "residual": residual}
    return Case(name, ctor, {}, [Call(args, seed=draw_seed(g))])


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        quant_case(
            "4 bits, 28 tokens, groups of 4, a window of 8 (4 keys and 8 values in full precision)",
            g,
            1,
            2,
            28,
            8,
            4,
            4,
            8,
        ),
        quant_case("2 bits, 24 tokens, batch 2, groups of 4, a window of 8", g, 2, 2, 24, 8, 2, 4, 8),
        quant_case(
            "8 bits, a key channel constant over a group and a padded value token of zeros",
            g,
            1,
            2,
            24,
            16,
            8,
            8,
            8,
            constant=True,
        ),
        quant_case("4 tokens, shorter than the window of 8: nothing quantised", g, 1, 1, 4, 8, 4, 4, 8),
    ]


def read_back(case: Case, outputs: dict) -> dict:
    """The learner's (keys_hat, values_hat), named so."""
    return {"step1.keys_hat": outputs.get("step1.out"), "step1.values_hat": outputs.get("step1.lse")}


def expected(case: Case, variant: QuantVariant) -> dict:
    """{name: tensor}, named as ``read_back`` names the learner's outputs."""
    keys_hat, values_hat = kivi_forward(case.calls[0].args, variant)
    return {"step1.keys_hat": keys_hat, "step1.values_hat": values_hat}


# ---------------------------------------------------------------------------------------------
# the mistakes

M_KEYS_PER_TOKEN = Mistake("kivi_keys_per_token")
M_VALUES_PER_CHANNEL = Mistake("kivi_values_per_channel")
M_NO_WINDOW = Mistake("kivi_no_residual_window")
M_KEYS_WINDOW = Mistake("kivi_keys_window_like_values")
M_GROUP_AXIS = Mistake("kivi_wrong_group_axis")
M_ZERO_RANGE = Mistake("kivi_zero_range_nan")
M_ZERO_POINT = Mistake("kivi_zero_point_missing")


def mutants() -> list:
    """Known-wrong variants, most specific first."""
    ok = QuantVariant()
    return [
        mutant(M_KEYS_PER_TOKEN, replace(ok, key_axis="token")),
        mutant(M_VALUES_PER_CHANNEL, replace(ok, value_axis="channel")),
        mutant(M_NO_WINDOW, replace(ok, window="none")),
        mutant(M_KEYS_WINDOW, replace(ok, window="last")),
        mutant(M_GROUP_AXIS, replace(ok, groups="swapped")),
        mutant(M_GROUP_AXIS, replace(ok, groups="strided")),
        mutant(M_ZERO_RANGE, replace(ok, zero_range="nan")),
        mutant(M_ZERO_POINT, replace(ok, zero_point="not_added")),
        mutant(M_ZERO_POINT, replace(ok, zero_point="not_subtracted")),
    ]


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.kivi_keys_per_token": (
        "the keys were quantised per token (groups of channels): KIVI quantises keys per channel, each channel in "
        "groups of group_size consecutive tokens, so that an outlier channel does not set every token's range",
        "键按逐 token 量化了（按通道分组）：KIVI 对键逐通道量化，每个通道按连续 group_size 个 token 分组，这样离群"
        "通道不会决定每个 token 的范围",
    ),
    "mutant.kivi_values_per_channel": (
        "the values were quantised per channel (groups of tokens): KIVI quantises values per token, each token in "
        "groups of group_size consecutive channels",
        "值按逐通道量化了（按 token 分组）：KIVI 对值逐 token 量化，每个 token 按连续 group_size 个通道分组",
    ),
    "mutant.kivi_no_residual_window": (
        "every token was quantised: the last tokens stay in full precision (keys: T % residual of them, values: "
        "the last residual)",
        "所有 token 都量化了：最近的 token 要保持全精度（键：最后 T % residual 个；值：最后 residual 个）",
    ),
    "mutant.kivi_keys_window_like_values": (
        "the keys kept the last residual tokens in full precision, as the values do: KIVI quantises keys a window of "
        "residual tokens at a time, so the first T - T % residual keys are quantised",
        "键像值一样保留了最后 residual 个全精度 token：KIVI 的键要攒够 residual 个才一起量化，所以前 "
        "T - T % residual 个键都已量化",
    ),
    "mutant.kivi_wrong_group_axis": (
        "the groups were cut the wrong way: x.unflatten(dim, (group_size, n // group_size)) makes groups of "
        "n // group_size; a group is group_size consecutive entries, x.unflatten(dim, (n // group_size, group_size)), "
        "its members on the second new axis",
        "分组切反了：x.unflatten(dim, (group_size, n // group_size)) 得到的是 n // group_size 个一组；一组应是连续 "
        "group_size 个元素，x.unflatten(dim, (n // group_size, group_size))，组员在第二个新轴上",
    ),
    "mutant.kivi_zero_range_nan": (
        "a group whose numbers are all equal came back as NaN: its scale (max - min) / (2^bits - 1) is 0 and "
        "(x - min) / 0 is 0 / 0; give such a group a scale of 1 (its codes are then 0)",
        "数值全相等的一组读回成了 NaN：它的缩放因子 (max - min) / (2^bits - 1) 为 0，(x - min) / 0 就是 0 / 0；"
        "给这样的组一个为 1 的缩放因子（它的编码就都是 0）",
    ),
    "mutant.kivi_zero_point_missing": (
        "the zero point was left out: codes are round((x - min) / scale), and read back as code * scale + min",
        "漏了零点：编码是 round((x - min) / scale)，读回时要算 code · scale + min",
    ),
    **case_titles(
        {
            "4 bits, 28 tokens, groups of 4, a window of 8 (4 keys and 8 values in full precision)": "4 比特，28 个 token，每组 4 个，窗口 8（4 个键和 8 个值保持全精度）",
            "2 bits, 24 tokens, batch 2, groups of 4, a window of 8": "2 比特，24 个 token，批大小 2，每组 4 个，窗口 8",
            "8 bits, a key channel constant over a group and a padded value token of zeros": "8 比特，一个键通道在一组内为常数，一个值 token 是全零的填充",
            "4 tokens, shorter than the window of 8: nothing quantised": "4 个 token，比窗口 8 短：什么都不量化",
        }
    ),
}


EXERCISE = Exercise(
    id="kv_quant",
    order=18,
    notebook="17_kv_quant",
    points=3,
    kind="function",
    contract="kivi_quantize",
    args=("keys", "values", "bits", "group_size", "residual"),
    cases=cases,
    expected=expected,
    correct=QuantVariant(),
    mutants=mutants,
    read_back=read_back,
)
