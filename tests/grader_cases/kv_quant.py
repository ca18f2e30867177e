"""Learner-style code for exercise 17b (kv_quant): the reference solution (lines tagged ``#TAG``), alternative
correct implementations in other styles (KIVI's transposed keys with one helper along the last axis, loops over the
groups with ``torch.aminmax``), a stub, and the misconception mutants as line edits of the reference (``mutate`` from
implementations.py)."""

from tests.grader_cases.implementations import HEADER

KIVI = (
    HEADER
    + '''
def quantize(x, bits, dim, group_size):
    """x quantised in groups of group_size consecutive entries along dim, and dequantised."""
    n = x.shape[dim]
    g = x.unflatten(dim, (n // group_size, group_size))  #GROUPS
    axis = dim % x.ndim + 1  # the members of each group
    lo, hi = g.amin(axis, keepdim=True), g.amax(axis, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    scale = torch.where(hi > lo, scale, torch.ones_like(scale))  #ZERO_RANGE
    codes = torch.round((g - lo) / scale).clamp(0, 2**bits - 1)  #CODES
    return (codes * scale + lo).reshape(x.shape)  #DEQUANT


def kivi_quantize(keys, values, bits, group_size, residual):
    T = keys.shape[2]
    n_keys = T - T % residual  #KEYS_WINDOW
    n_values = max(0, T - residual)  #VALUES_WINDOW
    keys_hat, values_hat = keys.clone(), values.clone()
    if n_keys:
        keys_hat[:, :, :n_keys] = quantize(keys[:, :, :n_keys], bits, -2, group_size)  #KEY_AXIS
    if n_values:
        values_hat[:, :, :n_values] = quantize(values[:, :, :n_values], bits, -1, group_size)  #VALUE_AXIS
    return keys_hat, values_hat
'''
)

KIVI_REFERENCE = KIVI

KIVI_ALTERNATIVES = {
    # keys transposed to (B, H, d, T) as KIVI's Triton path lays them out, one helper along the last axis; a
    # zero-range group handled by clamping the scale and putting its numbers back
    "last_axis_like_kivi": HEADER
    + """
def _quant_last(x, bits, G):
    shape = x.shape
    g = x.reshape(*shape[:-1], shape[-1] // G, G)
    mn = g.min(dim=-1, keepdim=True).values
    mx = g.max(dim=-1, keepdim=True).values
    levels = 2 ** bits - 1
    scale = (mx - mn) / levels
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = ((g - mn) / safe).round().clamp(0, levels)
    return (q * safe + mn).reshape(shape)


def kivi_quantize(keys, values, bits, group_size, residual):
    T = keys.shape[-2]
    kq = (T // residual) * residual
    vq = T - residual if T > residual else 0
    k_out = keys.clone()
    v_out = values.clone()
    if kq > 0:
        k_out[..., :kq, :] = _quant_last(keys[..., :kq, :].transpose(-1, -2), bits, group_size).transpose(-1, -2)
    if vq > 0:
        v_out[..., :vq, :] = _quant_last(values[..., :vq, :], bits, group_size)
    return k_out, v_out
""",
    # a loop over the groups of tokens (keys) and torch.aminmax, the concatenation of quantised and full parts
    "loops_and_cat": HEADER
    + """
def kivi_quantize(keys, values, bits, group_size, residual):
    levels = 2 ** bits - 1

    def fake(x, dim):
        lo, hi = torch.aminmax(x, dim=dim, keepdim=True)
        step = (hi - lo) / levels
        step[step == 0] = 1.0
        return torch.round((x - lo) / step).clamp(0, levels) * step + lo

    T = keys.shape[2]
    n_k = residual * (T // residual)
    k_parts = [fake(keys[:, :, s:s + group_size], dim=2) for s in range(0, n_k, group_size)]
    k_hat = torch.cat(k_parts + [keys[:, :, n_k:]], dim=2)
    n_v = max(T - residual, 0)
    d = values.shape[-1]
    v_parts = [fake(values[:, :, :n_v, c:c + group_size], dim=3) for c in range(0, d, group_size)]
    v_hat = torch.cat([torch.cat(v_parts, dim=3), values[:, :, n_v:]], dim=2)
    return k_hat, v_hat
""",
}

KIVI_STUB = (
    HEADER
    + """
def kivi_quantize(keys, values, bits, group_size, residual):
    raise NotImplementedError
"""
)

KIVI_MUTANTS = [
    (
        "kivi_keys_per_token",
        {"KEY_AXIS": "keys_hat[:, :, :n_keys] = quantize(keys[:, :, :n_keys], bits, -1, group_size)"},
    ),
    (
        "kivi_values_per_channel",
        {"VALUE_AXIS": "values_hat[:, :, :n_values] = quantize(values[:, :, :n_values], bits, -2, group_size)"},
    ),
    ("kivi_no_residual_window", {"KEYS_WINDOW": "n_keys = T", "VALUES_WINDOW": "n_values = T"}),
    ("kivi_keys_window_like_values", {"KEYS_WINDOW": "n_keys = max(0, T - residual)"}),
    ("kivi_wrong_group_axis", {"GROUPS": "g = x.unflatten(dim, (group_size, n // group_size))"}),
    ("kivi_zero_range_nan", {"ZERO_RANGE": "scale = scale"}),
    ("kivi_zero_point_missing", {"DEQUANT": "return (codes * scale).reshape(x.shape)"}),
]


FIXTURES = {
    "kv_quant": {
        "reference": KIVI_REFERENCE,
        "alternatives": KIVI_ALTERNATIVES,
        "stubs": {"stub": KIVI_STUB},
        "mutants": KIVI_MUTANTS,
    }
}
