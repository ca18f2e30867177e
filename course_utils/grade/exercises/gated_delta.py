"""Exercise 16: ``gated_delta_rule(q, k, v, g, beta, initial_state=None, chunk_size=None)``, Gated DeltaNet's
recurrence (notebook 16): q and k L2-normalised, q scaled by 1/sqrt(K), then per token and head the state decays by
exp(g), takes the delta rule's correction and is read by the query. A function: it returns (o, final_state) in fla's
layout, the state (B, H, K, V); the ``initial_state`` it is handed must come back unchanged (read back after the call).

The stretch: with ``chunk_size`` an int, the same outputs computed in chunks (the UT transform within a chunk, the
state across chunks). Those cases accept any correct computation, the recurrence included: their check names the
chunked form's mistakes where a learner makes them, it cannot tell whether a learner chunked.

The reference computation and each misconception are the flags of ``DeltaVariant``, run in float32 as the learner's
function runs. A mistake inside the recurrence's loop may be the learner's recurrence alone (their chunked form
right) or their chunked cases too (computed through the same recurrence): ``chunked`` tells the two apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..kinds.function import Call
from ..kit import Mistake, case_titles, draw_seed, mutant
from ..registry import Exercise
from ..types import Case
from .online_softmax import M_NO_SCALE

# ---------------------------------------------------------------------------------------------
# the reference computation, its mistakes as flags


@dataclass(frozen=True)
class DeltaVariant:
    # the recurrence's loop
    delta: bool = True  # False: plain linear attention, S += k (beta v)^T, nothing subtracted
    beta: str = "ok"  # ok | none (v - S^T k) | v_only (beta v - S^T k) | dropped (with delta=False: S += k v^T)
    decay: str = "before"  # before | none | after (written, then decayed) | g (S * g instead of S * exp(g))
    read: str = "after"  # after | before (o_t read from the state before token t's write)
    # shared by both forms
    normalise: str = "both"  # both | none | q_only (keys raw) | k_only (queries raw)
    scale: bool = True
    state: str = "fla"  # fla (K, V) | transposed (the papers' (V, K) returned)
    in_place: bool = False  # the initial state handed in is updated in place (it ends as the final state)
    # the stretch: how the chunk_size cases are computed
    chunked: str = "own"  # own (the chunked form, its flags below) | recurrence (the loop above, its flags)
    system_diagonal: bool = False  # the UT system's mask keeps its diagonal: each token corrects itself too
    read_diagonal: bool = True  # False: a token does not read its own write within its chunk
    w_decay: bool = True  # False: w = T beta K, without exp(gamma)
    carry_decay: bool = True  # False: the state passed to the next chunk without the chunk's decay
    tail: bool = True  # False: a last chunk shorter than chunk_size is dropped


def _l2(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def _prepare(q, k, var: DeltaVariant):
    if var.normalise in ("both", "q_only"):
        q = _l2(q)
    if var.normalise in ("both", "k_only"):
        k = _l2(k)
    return (q / math.sqrt(q.shape[-1]) if var.scale else q), k


def recurrent(q, k, v, g, beta, state, var: DeltaVariant):
    """q, k (B, T, H, K), v (B, T, H, V), g, beta (B, T, H), state (B, H, K, V) or None: (o, final state (B, H, K, V))."""
    q, k = _prepare(q, k, var)
    b, t, h, dk = k.shape
    s = q.new_zeros(b, h, dk, v.shape[-1]) if state is None else state.clone()
    out = q.new_zeros(b, t, h, v.shape[-1])
    for i in range(t):
        rate = (g[:, i] if var.decay == "g" else g[:, i].exp())[..., None, None]  # (B, H, 1, 1)
        if var.decay in ("before", "g"):
            s = s * rate
        if var.read == "before":
            out[:, i] = torch.einsum("bhk,bhkv->bhv", q[:, i], s)
        k_i, v_i, b_i = k[:, i], v[:, i], beta[:, i, :, None]
        predicted = torch.einsum("bhk,bhkv->bhv", k_i, s)  # S^T k
        if not var.delta:
            correction = v_i if var.beta == "dropped" else b_i * v_i
        elif var.beta == "none":
            correction = v_i - predicted
        elif var.beta == "v_only":
            correction = b_i * v_i - predicted
        else:
            correction = b_i * (v_i - predicted)
        s = s + k_i[..., None] * correction[..., None, :]
        if var.decay == "after":
            s = s * rate
        if var.read == "after":
            out[:, i] = torch.einsum("bhk,bhkv->bhv", q[:, i], s)
    return out, s


def chunked(q, k, v, g, beta, chunk_size, state, var: DeltaVariant):
    """The same in chunks of ``chunk_size``: the writes of a chunk solved at once, U = u - w S0."""
    q, k = _prepare(q, k, var)
    q, k, v, g, beta = (x.transpose(1, 2) for x in (q, k, v, g, beta))  # (B, H, T, ...)
    b, h, t, dk = k.shape
    s = q.new_zeros(b, h, dk, v.shape[-1]) if state is None else state.clone()
    out = q.new_zeros(b, h, t, v.shape[-1])
    stop = t if var.tail else t - t % chunk_size
    for start in range(0, stop, chunk_size):
        end = min(start + chunk_size, t)
        q_c, k_c, v_c, b_c = q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], beta[:, :, start:end, None]
        gamma = g[:, :, start:end].cumsum(-1)  # (B, H, C): log of the decay since the chunk's start
        later = torch.ones(end - start, end - start, dtype=torch.bool).triu(1)
        decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(later, -math.inf).exp()  # (B, H, C, C)
        corrects = b_c * (k_c @ k_c.transpose(-1, -2)) * decay
        system = torch.eye(end - start, dtype=q.dtype) + (corrects.tril() if var.system_diagonal else corrects.tril(-1))
        u = torch.linalg.solve_triangular(system, b_c * v_c, upper=False)
        w = torch.linalg.solve_triangular(
            system, b_c * k_c * (gamma.exp()[..., None] if var.w_decay else 1), upper=False
        )
        writes = u - w @ s
        reads = (q_c @ k_c.transpose(-1, -2)) * decay
        reads = reads if var.read_diagonal else reads.tril(-1)
        out[:, :, start:end] = (q_c * gamma.exp()[..., None]) @ s + reads @ writes
        last = gamma[..., -1:]  # (B, H, 1)
        kept = last.exp()[..., None] * s if var.carry_decay else s
        s = kept + (k_c * (last - gamma).exp()[..., None]).transpose(-1, -2) @ writes
    return out.transpose(1, 2), s


def forward(args, var: DeltaVariant):
    """{o, final_state, initial_state (as the call left it)} of ``gated_delta_rule(*args)`` with ``var``'s mistakes."""
    q, k, v, g, beta, state, chunk_size = args
    if chunk_size is None or var.chunked == "recurrence":
        out, final = recurrent(q, k, v, g, beta, state, var)
    else:  # the chunked form: the loop's mistakes (delta, beta, decay, read) are the recurrence's, not its own
        out, final = chunked(q, k, v, g, beta, chunk_size, state, var)
    handed = None if state is None else (final if var.in_place else state)
    return {"o": out, "final_state": final.transpose(-1, -2) if var.state == "transposed" else final, "handed": handed}


# ---------------------------------------------------------------------------------------------
# cases

STATE = (("initial_state", 5),)  # the argument read back after the call: it must come back unchanged


def delta_case(name, g, b, t, h, dk, dv, *, state, chunk_size=None, key_norm=2.0):
    """Raw q and k (keys of norm about ``key_norm``: not normalised, the state would grow), decays exp(g) in
    (0.45, 0.95), write strengths beta in (0.1, 0.9)."""
    q = torch.randn(b, t, h, dk, generator=g)
    k = torch.randn(b, t, h, dk, generator=g) * key_norm / math.sqrt(dk)
    v = torch.randn(b, t, h, dv, generator=g)
    decay = -torch.rand(b, t, h, generator=g) * 0.75 - 0.05
    beta = torch.rand(b, t, h, generator=g) * 0.8 + 0.1
    initial = torch.randn(b, h, dk, dv, generator=g) if state else None
    args = (q, k, v, decay, beta, initial, chunk_size)
    call = Call(args, seed=draw_seed(g), state=STATE if state else ())
    return Case(name, {"chunk_size": chunk_size}, {}, [call], meta={"tol": (2e-4, 2e-5)})


def cases(g) -> list[Case]:
    """The cases, drawn from ``g`` (seeded by the grader's secret seed)."""
    return [
        delta_case("2 sequences of 7 tokens, 3 heads, K 8, V 4, no initial state", g, 2, 7, 3, 8, 4, state=False),
        delta_case("one token, 2 heads, K = V = 6, an initial state", g, 1, 1, 2, 6, 6, state=True),
        delta_case("batch 2, 13 tokens, 2 heads, K 4, V 8, an initial state", g, 2, 13, 2, 4, 8, state=True),
        delta_case(
            "chunk_size 4: 11 tokens (the last chunk 3), 2 heads, K 6, V 4, an initial state",
            g,
            2,
            11,
            2,
            6,
            4,
            state=True,
            chunk_size=4,
        ),
        delta_case(
            "chunk_size 8: 16 tokens, 2 heads, K = V = 8, no initial state",
            g,
            1,
            16,
            2,
            8,
            8,
            state=False,
            chunk_size=8,
        ),  # fmt: skip
    ]


def expected(case: Case, variant: DeltaVariant) -> dict:
    """{name: tensor}: the outputs as ``read_back`` names the learner's."""
    with torch.no_grad():
        found = forward(case.calls[0].args, variant)
    outs = {"step1.out": found["o"], "step1.final_state": found["final_state"]}
    if found["handed"] is not None:
        outs["step1.initial_state"] = found["handed"]
    return outs


def read_back(case: Case, outputs: dict) -> dict:
    """The learner's pair is (o, final_state): the function kind calls its second output lse."""
    return {("step1.final_state" if name == "step1.lse" else name): value for name, value in outputs.items()}


# ---------------------------------------------------------------------------------------------
# mistakes

M_NO_DELTA = Mistake("no_delta")
M_BETA_MISSING = Mistake("beta_missing")
M_BETA_ON_V = Mistake("beta_on_v_only")
M_DECAY_MISSING = Mistake("decay_missing")
M_DECAY_AFTER = Mistake("decay_after_write")
M_DECAY_IS_G = Mistake("decay_is_g")
M_READ_BEFORE = Mistake("read_before_write")
M_KEYS_RAW = Mistake("keys_not_normalised")
M_QUERIES_RAW = Mistake("queries_not_normalised")
M_STATE_TRANSPOSED = Mistake("state_transposed")
M_IN_PLACE = Mistake("initial_state_modified")
M_SYSTEM_DIAGONAL = Mistake("chunk_system_with_diagonal")
M_READ_DIAGONAL = Mistake("chunk_read_without_diagonal")
M_W_DECAY = Mistake("chunk_w_without_decay")
M_CARRY_DECAY = Mistake("chunk_state_not_decayed")
M_TAIL = Mistake("chunk_tail_dropped")


def mutants() -> list:
    """Known-wrong variants, most specific first. A mistake in the recurrence's loop twice: in the recurrence alone
    (the learner's chunked form right), and in the chunk_size cases too (computed through that recurrence)."""
    ok = DeltaVariant()
    loop: list[tuple[Mistake, dict[str, Any]]] = [
        (M_NO_DELTA, dict(delta=False)),
        (M_NO_DELTA, dict(delta=False, beta="dropped")),
        (M_BETA_MISSING, dict(beta="none")),
        (M_BETA_ON_V, dict(beta="v_only")),
        (M_DECAY_MISSING, dict(decay="none")),
        (M_DECAY_AFTER, dict(decay="after")),
        (M_DECAY_IS_G, dict(decay="g")),
        (M_READ_BEFORE, dict(read="before")),
    ]
    shared: list[tuple[Mistake, dict[str, Any]]] = [
        (M_KEYS_RAW, dict(normalise="none")),
        (M_KEYS_RAW, dict(normalise="q_only")),
        (M_QUERIES_RAW, dict(normalise="k_only")),
        (M_NO_SCALE, dict(scale=False)),
        (M_STATE_TRANSPOSED, dict(state="transposed")),
        (M_IN_PLACE, dict(in_place=True)),
    ]
    stretch: list[tuple[Mistake, dict[str, Any]]] = [
        (M_SYSTEM_DIAGONAL, dict(system_diagonal=True)),
        (M_READ_DIAGONAL, dict(read_diagonal=False)),
        (M_W_DECAY, dict(w_decay=False)),
        (M_CARRY_DECAY, dict(carry_decay=False)),
        (M_TAIL, dict(tail=False)),
    ]
    found = []
    for mistake, flags in loop:
        found.append(mutant(mistake, replace(ok, **flags, chunked="recurrence")))
        found.append(mutant(mistake, replace(ok, **flags)))
    found += [mutant(mistake, replace(ok, **flags)) for mistake, flags in shared + stretch]
    return found


TEXTS: dict[str, tuple[str, str]] = {
    "mutant.no_delta": (
        "plain linear attention: the state adds every write, S += k (beta v)^T, and forgets nothing it should "
        "replace; the delta rule writes only the correction, S += k (beta (v - S^T k))^T, after the decay",
        "这是朴素的线性注意力：状态把每次写入都加上去，S += k (beta v)^T，该替换的东西一样也没忘；delta 规则只写入"
        "修正量，S += k (beta (v - S^T k))^T，而且在衰减之后",
    ),
    "mutant.beta_missing": (
        "the correction is written at full strength: multiply it by beta, S += k (beta (v - S^T k))^T",
        "修正量按全强度写入了：要乘以 beta，S += k (beta (v - S^T k))^T",
    ),
    "mutant.beta_on_v_only": (
        "beta scales v only (beta v - S^T k): it is the learning rate of the whole correction, beta (v - S^T k)",
        "beta 只乘在了 v 上（beta v - S^T k）：它是整个修正量的学习率，应为 beta (v - S^T k)",
    ),
    "mutant.decay_missing": (
        "the state never decays: multiply it by exp(g_t) at every token, before the write",
        "状态从不衰减：每个 token 都要先把它乘以 exp(g_t)，再写入",
    ),
    "mutant.decay_after_write": (
        "the state decays after the write: decay first, S = exp(g_t) S, then compute the correction from the decayed "
        "state and write it",
        "状态是在写入之后才衰减的：要先衰减，S = exp(g_t) S，再用衰减后的状态算修正量并写入",
    ),
    "mutant.decay_is_g": (
        "the state was multiplied by g itself: g is the log of the decay, multiply by exp(g)",
        "状态直接乘了 g：g 是衰减的对数，要乘以 exp(g)",
    ),
    "mutant.read_before_write": (
        "o_t reads the state before token t's own write: read after it, o_t = S_t^T q_t",
        "o_t 读的是第 t 个 token 写入之前的状态：要在写入之后读，o_t = S_t^T q_t",
    ),
    "mutant.keys_not_normalised": (
        "the keys are not L2-normalised: with |k|^2 > 2 / beta the write multiplies what is stored along k by "
        "1 - beta |k|^2 < -1 and the state grows; normalise q and k over their last axis, x / sqrt(sum x^2 + 1e-6)",
        "键没有做 L2 归一化：|k|^2 > 2 / beta 时，写入会把沿 k 存的内容乘以 1 - beta |k|^2 < -1，状态越来越大；"
        "要在最后一维上归一化 q 和 k，x / sqrt(sum x^2 + 1e-6)",
    ),
    "mutant.queries_not_normalised": (
        "the queries are not L2-normalised: normalise q as well as k over their last axis, then scale q by 1/sqrt(K)",
        "查询没有做 L2 归一化：q 和 k 都要在最后一维上归一化，然后再把 q 乘以 1/sqrt(K)",
    ),
    "mutant.state_transposed": (
        "the final state comes back as (V, K), the papers' layout: return it as fla's naive functions do, (B, H, K, V), keys "
        "by values",
        "返回的最终状态是论文里的 (V, K) 布局：要像 fla 的朴素参考函数那样返回，(B, H, K, V)，键在前、值在后",
    ),
    "mutant.initial_state_modified": (
        "the initial_state you were handed was updated in place: it belongs to the caller, who may decode from it "
        "again; start from a copy, initial_state.clone()",
        "传进来的 initial_state 被原地修改了：它属于调用者，调用者可能还要从它开始再解码一次；要从它的副本开始，"
        "initial_state.clone()",
    ),
    "mutant.chunk_system_with_diagonal": (
        "chunked form: the UT system's mask keeps its diagonal, so each token corrects its own write; L[i, j] = "
        "beta_i exp(gamma_i - gamma_j) k_i . k_j for j < i only (tril(-1))",
        "分块形式：UT 方程组的掩码保留了对角线，于是每个 token 还修正了自己的写入；L[i, j] = "
        "beta_i exp(gamma_i - gamma_j) k_i . k_j 只取 j < i（tril(-1)）",
    ),
    "mutant.chunk_read_without_diagonal": (
        "chunked form: a token does not read its own write; the outputs' mask keeps the diagonal, (Q K^T * Gamma) "
        "for j <= i",
        "分块形式：token 没有读到自己的写入；输出用的掩码要保留对角线，(Q K^T * Gamma) 取 j <= i",
    ),
    "mutant.chunk_w_without_decay": (
        "chunked form: w = T diag(beta) K forgets the decay from the chunk's start: w = T diag(beta exp(gamma)) K",
        "分块形式：w = T diag(beta) K 漏掉了从块开头起的衰减：应为 w = T diag(beta exp(gamma)) K",
    ),
    "mutant.chunk_state_not_decayed": (
        "chunked form: the state passed to the next chunk misses the chunk's decay: S = exp(gamma_C) S + "
        "(K * exp(gamma_C - gamma))^T U",
        "分块形式：传给下一块的状态漏掉了整块的衰减：S = exp(gamma_C) S + (K * exp(gamma_C - gamma))^T U",
    ),
    "mutant.chunk_tail_dropped": (
        "chunked form: the last chunk, shorter than chunk_size, was dropped; T need not be a multiple of chunk_size",
        "分块形式：最后一块不满 chunk_size，被丢掉了；T 不一定是 chunk_size 的整数倍",
    ),
    **case_titles(
        {
            "2 sequences of 7 tokens, 3 heads, K 8, V 4, no initial state": "2 条 7 个 token 的序列，3 个头，K 8，V 4，"
            "没有初始状态",
            "one token, 2 heads, K = V = 6, an initial state": "一个 token，2 个头，K = V = 6，给定初始状态",
            "batch 2, 13 tokens, 2 heads, K 4, V 8, an initial state": "batch 2，13 个 token，2 个头，K 4，V 8，"
            "给定初始状态",
            "chunk_size 4: 11 tokens (the last chunk 3), 2 heads, K 6, V 4, an initial state": "chunk_size 4：11 个 "
            "token（最后一块 3 个），2 个头，K 6，V 4，给定初始状态",
            "chunk_size 8: 16 tokens, 2 heads, K = V = 8, no initial state": "chunk_size 8：16 个 token，2 个头，"
            "K = V = 8，没有初始状态",
        }
    ),
}


EXERCISE = Exercise(
    id="gated_delta",
    order=16,
    notebook="16_gated_delta",
    points=3,
    kind="function",
    contract="gated_delta_rule",
    args=("q", "k", "v", "g", "beta", "initial_state", "chunk_size"),
    cases=cases,
    expected=expected,
    correct=DeltaVariant(),
    mutants=mutants,
    read_back=read_back,
)
