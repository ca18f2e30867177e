"""Interview mode's numeric follow-ups, checked: ``answer("kv_cache_bytes", 2 * 32 * ...)`` in a notebook. Each
question names the common wrong answers (a factor of 2 missing, float32 instead of float16, one head only)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .messages import Msg, joined
from .types import Result

# this module's texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "question": ("question {id}", "问题 {id}"),
    "not_implemented.answer": ("not implemented yet: answer {question}", "还没有作答：{question}"),
    "not_implemented.answers": ("not implemented yet: answer {answers}", "还没有作答：{answers}"),
    "q.llama2_7b": (
        "Llama-2-7B (32 layers, 32 heads, 32 KV heads, head_dim 128)",
        "Llama-2-7B（32 层，32 个头，32 个 KV 头，head_dim 128）",
    ),
    "q.kv_cache_bytes": (
        "bytes of the KV cache of {model} for one sequence of 4096 tokens in float16",
        "{model} 用 float16 处理一条 4096 个 token 的序列时，KV 缓存占多少字节",
    ),
    "q.kv_cache_bytes.only_k": (
        "that is only K (or only V): the cache holds both, a factor of 2",
        "这只是 K（或只是 V）：缓存里两个都要存，差了 2 倍",
    ),
    "q.kv_cache_bytes.float32": (
        "4 bytes per number is float32; the question says float16 (2 bytes)",
        "每个数 4 字节是 float32；题目说的是 float16（2 字节）",
    ),
    "q.kv_cache_bytes.one_layer": (
        "that is one layer's cache: multiply by the 32 layers",
        "这只是一层的缓存：还要乘以 32 层",
    ),
    "q.kv_cache_bytes.gib": (
        "2 GiB is right, but the question asks for bytes: 2 * 2**30",
        "2 GiB 是对的，但题目问的是字节数：2 * 2**30",
    ),
    "q.score_flops": (
        "FLOPs of the whole 4096 x 4096 score matrix Q·Kᵀ (masked entries too) in one layer of {model}, "
        "batch 1, prefill (a multiply-add counts as 2 FLOPs)",
        "{model} 的一层在预填充（prefill）4096 个 token、batch 为 1 时，算完整的 4096 x 4096 分数矩阵 Q·Kᵀ"
        "（被因果掩码遮住的位置也算）要多少 FLOPs（一次乘加算 2 个 FLOPs）",
    ),
    "q.score_flops.multiply_adds": (
        "that is half the answer: either multiply-adds (each is 2 FLOPs) or only the causal "
        "half of the matrix; the question counts FLOPs over the whole matrix, as a matmul "
        "computes it before the mask is applied",
        "这是答案的一半：要么算的是乘加次数（每次乘加是 2 个 FLOPs），要么只算了因果掩码留下的"
        "那一半；题目问的是整个矩阵的 FLOPs，矩阵乘法在加掩码之前就把它全算了",
    ),
    "q.score_flops.causal_multiply_adds": (
        "that is a quarter of the answer: multiply-adds (2 FLOPs each) over the "
        "causal half only; the question counts FLOPs over the whole matrix",
        "这是答案的四分之一：只数了因果掩码留下的那一半，而且数的是乘加次数（每次是 "
        "2 个 FLOPs）；题目问的是整个矩阵的 FLOPs",
    ),
    "q.score_flops.one_head": ("that is one head: there are 32", "这只是一个头：一共有 32 个"),
    "q.score_flops.d_model": (
        "the inner dimension of Q·Kᵀ per head is head_dim (128), not d_model; over 32 heads that "
        "is 4096 in total, so this is right only if you also dropped the heads",
        "每个头的 Q·Kᵀ 的内积维度是 head_dim（128），不是 d_model；32 个头加起来才是 4096，"
        "所以只有在你同时漏掉了头数时这个数才对",
    ),
    "q.grows_with_context": (
        "during decoding, what is kept from one step to the next and grows with the context "
        "length: 'queries', 'keys and values' or 'parameters' (the model's weight matrices)?",
        "解码时，哪一项要从一步保留到下一步、并且随上下文长度增长：'queries'、'keys and values' "
        "还是 'parameters'（模型的权重矩阵）？",
    ),
    "q.grows_with_context.queries": (
        "only the new token's query is needed at each step: that is why the cache holds no Q",
        "每一步只需要新 token 的查询：这正是缓存里不存 Q 的原因",
    ),
    "q.grows_with_context.weights": (
        "the parameters (the model's weight matrices) are fixed, whatever the context "
        "length; what grows is the cache of keys and values",
        "参数（模型的权重矩阵）是固定的，与上下文长度无关；随上下文增长的是键和值的缓存",
    ),
    "q.grows_with_context.attention_weights": (
        "the new token's attention weights do have one entry per cached token, "
        "but they are computed afresh at each step and not kept; what is kept, "
        "and grows, is the cache of keys and values",
        "新 token 的注意力权重确实每个缓存的 token 对应一项，但它们每一步都重新"
        "计算，不会保留下来；保留下来并不断增长的是键和值的缓存",
    ),
    "q.not_it": ("{value} is not it: {question}", "{value} 不对：{question}"),
    "q.not_a_number": ("expected a number, got {value}", "这里要填一个数，你给的是 {value}"),
    "q.ratio": (
        "{value:g} is {ratio:.3g} times the answer: recount the factors of {question}",
        "{value:g} 是正确答案的 {ratio:.3g} 倍：请重新数一数这道题里的各个因子：{question}",
    ),
    "q.line": ("{question}: {why}", "{question}：{why}"),
}

LLAMA2_7B = Msg("q.llama2_7b")  # Llama-2-7B (32 layers, 32 heads, 32 KV heads, head_dim 128)


@dataclass(frozen=True)
class Question:
    text: str  # the question (a text of messages.py)
    answer: float | str  # a number, or the canonical phrase of a choice
    wrong: dict = field(default_factory=dict)  # a known wrong answer -> what it means
    accept: tuple = ()  # other spellings of a choice


QUESTIONS = {
    "kv_cache_bytes": Question(
        Msg("q.kv_cache_bytes", model=LLAMA2_7B),
        2 * 32 * 32 * 128 * 4096 * 2,
        {
            32 * 32 * 128 * 4096 * 2: Msg("q.kv_cache_bytes.only_k"),
            2 * 32 * 32 * 128 * 4096 * 4: Msg("q.kv_cache_bytes.float32"),
            2 * 32 * 128 * 4096 * 2: Msg("q.kv_cache_bytes.one_layer"),
            2.0: Msg("q.kv_cache_bytes.gib"),
        },
    ),
    "score_flops": Question(
        Msg("q.score_flops", model=LLAMA2_7B),
        2 * 32 * 4096 * 4096 * 128,
        {
            32 * 4096 * 4096 * 128: Msg("q.score_flops.multiply_adds"),
            16 * 4096 * 4096 * 128: Msg("q.score_flops.causal_multiply_adds"),
            2 * 4096 * 4096 * 128: Msg("q.score_flops.one_head"),
            2 * 4096 * 4096 * 4096: Msg("q.score_flops.d_model"),
        },
    ),
    "grows_with_context": Question(
        Msg("q.grows_with_context"),
        "keys and values",
        {
            "queries": Msg("q.grows_with_context.queries"),
            # the model's weights (the choice the question offers) and the attention weights (not kept between steps)
            **dict.fromkeys(
                (
                    "parameters",
                    "weights",
                    "model weights",
                    "model parameters",
                    "weight matrices",
                    "the parameters",
                    "the model's weights",
                    "the model's parameters",
                ),
                Msg("q.grows_with_context.weights"),
            ),
            **dict.fromkeys(
                ("attention weights", "the attention weights", "attention scores", "scores", "the scores"),
                Msg("q.grows_with_context.attention_weights"),
            ),
        },
        accept=("kv", "k and v", "keys/values", "kv cache", "the kv cache", "keys, values", "k, v"),
    ),
}


def _norm(text) -> str:
    return " ".join(str(text).strip().lower().replace("_", " ").split())


def grade_answer(question_id: str, value) -> Result:
    """A Result for one answer: passed, or the named wrong answer, or what the right one is built from."""
    if question_id not in QUESTIONS:
        raise ValueError(f"unknown question {question_id!r}; known: {', '.join(QUESTIONS)}")
    q = QUESTIONS[question_id]
    name = Msg("question", id=question_id)
    if value is None:
        return Result(name, False, 0.0, 0, 1, "not_implemented", [Msg("not_implemented.answer", question=q.text)])
    if isinstance(q.answer, str):
        given = _norm(value)
        if given in {_norm(q.answer), *map(_norm, q.accept)}:
            return Result(name, True, 1.0, 1, 1)
        why = q.wrong.get(given) or Msg("q.not_it", value=repr(value), question=q.text)
        return Result(name, False, 0.0, 0, 1, "wrong_answer", [why])
    try:
        number = float(value)
    except (TypeError, ValueError):
        return Result(name, False, 0.0, 0, 1, "wrong_answer", [Msg("q.not_a_number", value=repr(value))])
    if math.isclose(number, q.answer, rel_tol=1e-6):
        return Result(name, True, 1.0, 1, 1)
    for wrong, why in q.wrong.items():
        if math.isclose(number, wrong, rel_tol=1e-6):
            return Result(name, False, 0.0, 0, 1, "wrong_answer", [why])
    ratio = number / q.answer if q.answer else float("inf")
    return Result(name, False, 0.0, 0, 1, "wrong_answer", [Msg("q.ratio", value=value, ratio=ratio, question=q.text)])


def answer(question_id: str, value, *, quiet: bool = False, lang: str | None = None) -> Result:
    """The self-check for a numeric follow-up: prints a pass line or what the wrong answer means (in ``lang``,
    default: the course's current language)."""
    result = grade_answer(question_id, value)
    if not quiet:
        print(result.report(lang))
    return result


def check_answers(answers: dict, *, quiet: bool = False, lang: str | None = None) -> Result:
    """Several follow-ups at once: one Result ("interview_numbers") whose score is the share answered right
    (printed in ``lang``, default: the course's current language)."""
    results = {q: grade_answer(q, v) for q, v in answers.items()}
    passed = sum(r.passed for r in results.values())
    total = len(results)
    if passed == total:
        result = Result("interview_numbers", True, 1.0, total, total)
    else:
        wrong = [Msg("q.line", question=q, why=r.messages[0]) for q, r in results.items() if not r.passed]
        key = "not_implemented" if all(r.diagnosis == "not_implemented" for r in results.values()) else "wrong_answer"
        # none answered: one "not implemented yet" before the questions, not one per question after it
        asked = [Msg("q.line", question=q, why=QUESTIONS[q].text) for q in results if q in QUESTIONS]
        result = Result(
            "interview_numbers",
            False,
            round(passed / total, 3),
            passed,
            total,
            key,
            [Msg("not_implemented.answers", answers=joined(asked)) if key == "not_implemented" else wrong[0]]
            + ([] if key == "not_implemented" else wrong[1:]),
        )
    if not quiet:
        print(result.report(lang))
    return result
