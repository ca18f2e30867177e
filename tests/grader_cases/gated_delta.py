"""The gated delta rule's mistakes, twice. For the references (notebook 16): ``REFERENCE_MUTANTS[name] = (diagnosis,
target, replacement)``, a drop-in replacement for the module-level function ``target`` of
course_utils.reference.gated_delta (``_recurrent``, ``_within_chunk``, ``_ut_transform``), which
tests/reference/test_gated_delta_mutants.py patches in to show that tests/reference/test_gated_delta.py fails. For
exercise 16: learner-style code (the solution, tagged for the mutants; alternatives in other styles; the stub) and
the mistakes as line edits of the solution (``mutate`` from implementations.py), in the contract test's one shape
(``FIXTURES``, tests/grade/exercises/fixtures.py).
"""

import torch

from course_utils.reference import gated_delta as gd


def recurrent_with(delta=True, beta="ok", decay="ok"):
    """The recurrence with one mistake: delta=False writes beta v k^T (plain linear attention); beta "none" | "v_only"
    (beta (v) - S^T k); decay "none" | "after_write" | "g" (the state multiplied by g itself, not exp(g))."""

    def recurrent(q, k, v, g, b, state):
        bsz, hv, t, dk = k.shape
        s = q.new_zeros(bsz, hv, dk, v.shape[-1]) if state is None else state.clone()
        out = q.new_zeros(bsz, hv, t, v.shape[-1])
        for i in range(t):
            rate = g[:, :, i][..., None] if decay == "g" else g[:, :, i].exp()[..., None]
            if decay in ("ok", "g"):
                s = s * rate
            k_i, rate_beta = k[:, :, i], b[:, :, i, None]
            predicted = torch.einsum("bhk,bhkv->bhv", k_i, s) if delta else 0
            if beta == "none":
                correction = v[:, :, i] - predicted
            elif beta == "v_only":
                correction = rate_beta * v[:, :, i] - predicted
            else:
                correction = rate_beta * (v[:, :, i] - predicted)
            s = s + k_i[..., None] * correction[..., None, :]
            if decay == "after_write":
                s = s * rate
            out[:, :, i] = torch.einsum("bhk,bhkv->bhv", q[:, :, i], s)
        return out, s

    return recurrent


WITHIN_CHUNK, UT_TRANSFORM = gd._within_chunk, gd._ut_transform  # the originals, before any patching


def ut_transform_with_diagonal(kk, k, v, beta, gamma):
    c = k.shape[-2]
    system = torch.eye(c, dtype=k.dtype, device=k.device) + (beta * kk).tril()  # each token corrects itself too
    u = torch.linalg.solve_triangular(system, beta * v, upper=False, unitriangular=False)
    w = torch.linalg.solve_triangular(system, beta * k * gamma.exp(), upper=False, unitriangular=False)
    return u, w


def within_chunk_without_own_write(q, k, gamma):
    kk, qk = WITHIN_CHUNK(q, k, gamma)
    return kk, qk.tril(-1)  # a token does not read its own write


def ut_transform_without_decay(kk, k, v, beta, gamma):
    return UT_TRANSFORM(kk, k, v, beta, torch.zeros_like(gamma))  # w forgets the decay since the chunk's start


REFERENCE_MUTANTS = {
    "no_delta": ("plain linear attention: S += beta v k^T, nothing subtracted", "_recurrent", recurrent_with(False)),
    "beta_missing": ("the correction written at full strength", "_recurrent", recurrent_with(beta="none")),
    "beta_on_v_only": ("beta v - S^T k: beta scales v only", "_recurrent", recurrent_with(beta="v_only")),
    "decay_missing": ("no gate: the state never decays", "_recurrent", recurrent_with(decay="none")),
    "decay_after_write": ("the gate applied after the write", "_recurrent", recurrent_with(decay="after_write")),
    "decay_is_g": ("the state multiplied by g, not exp(g)", "_recurrent", recurrent_with(decay="g")),
    "chunk_system_with_diagonal": (
        "the UT system's mask keeps its diagonal",
        "_ut_transform",
        ut_transform_with_diagonal,
    ),
    "chunk_read_without_diagonal": (
        "a token does not read its own write",
        "_within_chunk",
        within_chunk_without_own_write,
    ),
    "chunk_w_without_decay": ("w = T beta K without exp(gamma)", "_ut_transform", ut_transform_without_decay),
}


# ------------------------------------------------------------------------------------------------------ exercise 16

from tests.grader_cases.implementations import HEADER  # noqa: E402

# the solution notebook's code (solutions/16_gated_delta.ipynb), tagged for the mutants
REFERENCE = (
    HEADER
    + """
def gated_delta_rule(q, k, v, g, beta, initial_state=None, chunk_size=None):
    if chunk_size is not None:  #DISPATCH
        return chunk_gated_delta_rule(q, k, v, g, beta, chunk_size, initial_state)  #DISPATCH_CALL
    q, k = l2_normalise(q) / math.sqrt(q.shape[-1]), l2_normalise(k)  #NORMALISE
    B, T, H, K = k.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.clone()  #INIT
    o = q.new_zeros(B, T, H, v.shape[-1])
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]  #DECAY
        predicted = torch.einsum("bhk,bhkv->bhv", k[:, t], S)  #PREDICT
        correction = beta[:, t, :, None] * (v[:, t] - predicted)  #CORRECTION
        S = S + k[:, t, :, :, None] * correction[:, :, None, :]  #WRITE
        o[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t], S)  #READ
    return o, S  #RETURN


def l2_normalise(x):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def chunk_gated_delta_rule(q, k, v, g, beta, chunk_size, initial_state=None):
    q, k = l2_normalise(q) / math.sqrt(q.shape[-1]), l2_normalise(k)  #NORMALISE_CHUNK
    q, k, v, g, beta = (x.transpose(1, 2) for x in (q, k, v, g, beta))
    B, H, T, K = k.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.clone()
    o = q.new_zeros(B, H, T, v.shape[-1])
    for start in range(0, T, chunk_size):  #CHUNKS
        c = slice(start, min(start + chunk_size, T))
        qc, kc, vc, bc = q[:, :, c], k[:, :, c], v[:, :, c], beta[:, :, c, None]
        C = kc.shape[2]
        gamma = g[:, :, c].cumsum(dim=-1)
        later = torch.ones(C, C, dtype=torch.bool).triu(1)
        Gamma = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(later, -math.inf).exp()
        system = torch.eye(C) + (bc * (kc @ kc.transpose(-1, -2)) * Gamma).tril(-1)  #SYSTEM
        u = torch.linalg.solve_triangular(system, bc * vc, upper=False, unitriangular=True)  #U
        w = torch.linalg.solve_triangular(system, bc * gamma.exp()[..., None] * kc, upper=False, unitriangular=True)  #W
        U = u - w @ S
        o[:, :, c] = (qc * gamma.exp()[..., None]) @ S + ((qc @ kc.transpose(-1, -2)) * Gamma) @ U  #OUT
        last = gamma[..., -1:]
        S = last.exp()[..., None] * S + (kc * (last - gamma).exp()[..., None]).transpose(-1, -2) @ U  #CARRY
    return o.transpose(1, 2), S
"""
)

ALTERNATIVES = {
    # one head at a time, in float64, F.normalize, the papers' layout (S is V x K) with the transition as a matrix;
    # chunk_size ignored (the recurrence answers those cases too)
    "transition_matrix_per_head_float64": HEADER
    + """
def gated_delta_rule(q, k, v, g, beta, initial_state=None, chunk_size=None):
    dtype = q.dtype
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    q = F.normalize(q, dim=-1) / math.sqrt(q.shape[-1])
    k = F.normalize(k, dim=-1)
    B, T, H, K = k.shape
    V = v.shape[-1]
    o = torch.zeros(B, T, H, V, dtype=torch.float64)
    final = torch.zeros(B, H, K, V, dtype=torch.float64)
    eye = torch.eye(K, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(V, K, dtype=torch.float64) if initial_state is None else initial_state[b, h].double().T
            for t in range(T):
                kt = k[b, t, h]
                transition = g[b, t, h].exp() * (eye - beta[b, t, h] * torch.outer(kt, kt))
                S = S @ transition + beta[b, t, h] * torch.outer(v[b, t, h], kt)
                o[b, t, h] = S @ q[b, t, h]
            final[b, h] = S.T
    return o.to(dtype), final.to(dtype)
""",
    # the chunked form for every call (one chunk of T tokens when chunk_size is None), fla's naive style: the UT
    # system inverted by forward substitution, row by row, einsum throughout
    "chunked_forward_substitution": HEADER
    + """
def gated_delta_rule(q, k, v, g, beta, initial_state=None, chunk_size=None):
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(q.shape[-1])
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    B, T, H, K = k.shape
    chunk = T if chunk_size is None else chunk_size
    S = torch.zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state.clone()
    outs = []
    for start in range(0, T, chunk):
        qc, kc, vc = q[:, start:start + chunk], k[:, start:start + chunk], v[:, start:start + chunk]
        bc, gc = beta[:, start:start + chunk], g[:, start:start + chunk]
        C = kc.shape[1]
        gam = gc.cumsum(1)  # (B, C, H)
        diff = gam[:, :, None, :] - gam[:, None, :, :]  # (B, C, C, H): gamma_i - gamma_j
        Gamma = torch.where(torch.ones(C, C, dtype=torch.bool).tril()[None, :, :, None], diff, -math.inf).exp()
        L = torch.einsum("bih,bihd,bjhd,bijh->bhij", bc, kc, kc, Gamma).tril(-1)
        inverse = torch.zeros(B, H, C, C)
        for i in range(C):
            inverse[..., i, :] = torch.eye(C)[i] - torch.einsum("bhj,bhjc->bhc", L[..., i, :i], inverse[..., :i, :])
        u = torch.einsum("bhij,bjh,bjhv->bhiv", inverse, bc, vc)
        w = torch.einsum("bhij,bjh,bjhd->bhid", inverse, bc * gam.exp(), kc)
        U = u - torch.einsum("bhid,bhdv->bhiv", w, S)
        read = torch.einsum("bihd,bjhd,bijh->bhij", qc, kc, Gamma)
        outs.append(torch.einsum("bih,bihd,bhdv->bihv", gam.exp(), qc, S) + torch.einsum("bhij,bhjv->bihv", read, U))
        carried = torch.einsum("bjhd,bjh->bhjd", kc, (gam[:, -1:] - gam).exp())
        S = gam[:, -1].exp()[..., None, None] * S + torch.einsum("bhjd,bhjv->bhdv", carried, U)
    return torch.cat(outs, dim=1), S
""",
    # a loop over the heads with torch.bmm, F.normalize (its own eps); chunk_size ignored
    "loop_over_heads": HEADER
    + """
def gated_delta_rule(q, k, v, g, beta, initial_state=None, chunk_size=None):
    B, T, H, K = k.shape
    outs, finals = [], []
    for h in range(H):
        qh = F.normalize(q[:, :, h], dim=-1, eps=1e-12) / math.sqrt(K)
        kh = F.normalize(k[:, :, h], dim=-1, eps=1e-12)
        S = torch.zeros(B, K, v.shape[-1]) if initial_state is None else initial_state[:, h].clone()
        oh = []
        for t in range(T):
            S = g[:, t, h].exp()[:, None, None] * S
            err = v[:, t, h] - torch.bmm(kh[:, t, None, :], S)[:, 0]
            S = S + torch.bmm(kh[:, t, :, None], (beta[:, t, h, None] * err)[:, None, :])
            oh.append(torch.bmm(qh[:, t, None, :], S)[:, 0])
        outs.append(torch.stack(oh, dim=1))
        finals.append(S)
    return torch.stack(outs, dim=2), torch.stack(finals, dim=1)
""",
    "reference_with_stretch": REFERENCE,
}

STUB = (
    HEADER
    + """
def gated_delta_rule(q, k, v, g, beta, initial_state=None, chunk_size=None):
    # YOUR CODE HERE
    raise NotImplementedError("your code here")
"""
)

WITHOUT_STRETCH = {"DISPATCH": "if False:"}  # a learner who has not written the stretch: the recurrence answers all

# (expected diagnosis key, edits of the reference): the recurrence's mistakes, first without the stretch (the chunk
# cases answered by the same wrong recurrence), then with it (the chunked form right); the stretch's own mistakes
MUTANTS = [
    ("no_delta", {**WITHOUT_STRETCH, "PREDICT": "predicted = 0"}),
    ("no_delta", {"PREDICT": "predicted = 0"}),
    ("no_delta", {**WITHOUT_STRETCH, "CORRECTION": "correction = v[:, t]", "PREDICT": "pass"}),
    ("beta_missing", {**WITHOUT_STRETCH, "CORRECTION": "correction = v[:, t] - predicted"}),
    ("beta_on_v_only", {**WITHOUT_STRETCH, "CORRECTION": "correction = beta[:, t, :, None] * v[:, t] - predicted"}),
    ("beta_on_v_only", {"CORRECTION": "correction = beta[:, t, :, None] * v[:, t] - predicted"}),
    ("decay_missing", {**WITHOUT_STRETCH, "DECAY": "pass"}),
    ("decay_missing", {"DECAY": "pass"}),
    (
        "decay_after_write",
        {
            **WITHOUT_STRETCH,
            "DECAY": "pass",
            "WRITE": "S = (S + k[:, t, :, :, None] * correction[:, :, None, :]) * g[:, t].exp()[..., None, None]",
        },
    ),
    ("decay_is_g", {**WITHOUT_STRETCH, "DECAY": "S = S * g[:, t][..., None, None]"}),
    ("decay_is_g", {"DECAY": "S = S * g[:, t][..., None, None]"}),
    (
        "read_before_write",
        {
            **WITHOUT_STRETCH,
            "READ": "pass",
            "PREDICT": 'o[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t], S); '
            'predicted = torch.einsum("bhk,bhkv->bhv", k[:, t], S)',
        },
    ),
    ("keys_not_normalised", {**WITHOUT_STRETCH, "NORMALISE": "q, k = l2_normalise(q) / math.sqrt(q.shape[-1]), k"}),
    (
        "keys_not_normalised",
        {
            "NORMALISE": "q, k = q / math.sqrt(q.shape[-1]), k",
            "NORMALISE_CHUNK": "q, k = q / math.sqrt(q.shape[-1]), k",
        },
    ),
    ("queries_not_normalised", {**WITHOUT_STRETCH, "NORMALISE": "q, k = q / math.sqrt(q.shape[-1]), l2_normalise(k)"}),
    ("no_scale", {**WITHOUT_STRETCH, "NORMALISE": "q, k = l2_normalise(q), l2_normalise(k)"}),
    ("state_transposed", {**WITHOUT_STRETCH, "RETURN": "return o, S.transpose(-1, -2)"}),
    (
        "initial_state_modified",
        {
            **WITHOUT_STRETCH,
            "INIT": "S = q.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state",
            "DECAY": "S *= g[:, t].exp()[..., None, None]",
            "WRITE": "S += k[:, t, :, :, None] * correction[:, :, None, :]",
        },
    ),
    # the stretch: the UT system's mask with its diagonal (solved as a general triangular system)
    (
        "chunk_system_with_diagonal",
        {
            "SYSTEM": "system = torch.eye(C) + (bc * (kc @ kc.transpose(-1, -2)) * Gamma).tril()",
            "U": "u = torch.linalg.solve_triangular(system, bc * vc, upper=False)",
            "W": "w = torch.linalg.solve_triangular(system, bc * gamma.exp()[..., None] * kc, upper=False)",
        },
    ),
    (
        "chunk_read_without_diagonal",
        {"OUT": "o[:, :, c] = (qc * gamma.exp()[..., None]) @ S + ((qc @ kc.transpose(-1, -2)) * Gamma).tril(-1) @ U"},
    ),
    (
        "chunk_w_without_decay",
        {"W": "w = torch.linalg.solve_triangular(system, bc * kc, upper=False, unitriangular=True)"},
    ),
    (
        "chunk_state_not_decayed",
        {"CARRY": "S = S + (kc * (last - gamma).exp()[..., None]).transpose(-1, -2) @ U"},
    ),
    ("chunk_tail_dropped", {"CHUNKS": "for start in range(0, T - T % chunk_size, chunk_size):"}),
]

FIXTURES = {
    "gated_delta": {
        "reference": REFERENCE,
        "alternatives": ALTERNATIVES,
        "stubs": {"stub": STUB},
        "mutants": MUTANTS,
        "as_learner": ALTERNATIVES["loop_over_heads"],
    }
}
