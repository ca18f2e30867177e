"""Misconception mutants for the gated delta rule (notebook 16): the classic mistakes in the recurrence and in the
chunked form, each a drop-in replacement for one piece of course_utils.reference.gated_delta.

``MUTANTS[name] = (diagnosis, target, replacement)``: ``target`` names the module-level function replaced
(``_recurrent``, ``_within_chunk``, ``_ut_transform``); tests/reference/test_gated_delta_mutants.py patches each in
and shows that tests/reference/test_gated_delta.py fails.
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


MUTANTS = {
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
