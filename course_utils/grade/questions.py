"""Interview mode's numeric follow-ups, checked: ``answer("kv_cache_bytes", 2 * 32 * ...)`` in a notebook. Each
question names the common wrong answers (a factor of 2 missing, float32 instead of float16, one head only)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .diagnose import Result

LLAMA2_7B = "Llama-2-7B (32 layers, 32 heads, 32 KV heads, head_dim 128)"


@dataclass(frozen=True)
class Question:
    text: str
    answer: object                  # a number, or the canonical phrase of a choice
    wrong: dict = field(default_factory=dict)  # a known wrong answer -> what it means
    accept: tuple = ()              # other spellings of a choice


QUESTIONS = {
    "kv_cache_bytes": Question(
        f"bytes of the KV cache of {LLAMA2_7B} for one sequence of 4096 tokens in float16",
        2 * 32 * 32 * 128 * 4096 * 2,
        {32 * 32 * 128 * 4096 * 2: "that is only K (or only V): the cache holds both, a factor of 2",
         2 * 32 * 32 * 128 * 4096 * 4: "4 bytes per number is float32; the question says float16 (2 bytes)",
         2 * 32 * 128 * 4096 * 2: "that is one layer's cache: multiply by the 32 layers",
         2.0: "2 GiB is right, but the question asks for bytes: 2 * 2**30"}),
    "score_flops": Question(
        f"FLOPs of the score matrix Q·Kᵀ in one layer of {LLAMA2_7B} for 4096 tokens, batch 1, prefill "
        "(a multiply-add counts as 2 FLOPs)",
        2 * 32 * 4096 * 4096 * 128,
        {32 * 4096 * 4096 * 128: "that counts multiply-adds: each is 2 FLOPs",
         2 * 4096 * 4096 * 128: "that is one head: there are 32",
         2 * 4096 * 4096 * 4096: "the inner dimension of Q·Kᵀ per head is head_dim (128), not d_model; over 32 heads "
                                 "that is 4096 in total, so this is right only if you also dropped the heads"}),
    "grows_with_context": Question(
        "during decoding, which grows with the context length: 'queries', 'keys and values' or 'weights'?",
        "keys and values",
        {"queries": "only the new token's query is needed at each step: that is why the cache holds no Q",
         "weights": "the parameters are fixed; what grows is the cache of keys and values"},
        accept=("kv", "k and v", "keys/values", "kv cache", "the kv cache", "keys, values", "k, v")),
}


def _norm(text) -> str:
    return " ".join(str(text).strip().lower().replace("_", " ").split())


def grade_answer(question_id: str, value) -> Result:
    """A Result for one answer: passed, or the named wrong answer, or what the right one is built from."""
    if question_id not in QUESTIONS:
        raise ValueError(f"unknown question {question_id!r}; known: {', '.join(QUESTIONS)}")
    q = QUESTIONS[question_id]
    name = f"question {question_id}"
    if value is None:
        return Result(name, False, 0.0, 0, 1, "not_implemented", [f"not implemented yet: answer {q.text}"])
    if isinstance(q.answer, str):
        given = _norm(value)
        if given in {_norm(q.answer), *map(_norm, q.accept)}:
            return Result(name, True, 1.0, 1, 1)
        why = q.wrong.get(given)
        return Result(name, False, 0.0, 0, 1, "wrong_answer", [why or f"{value!r} is not it: {q.text}"])
    try:
        number = float(value)
    except (TypeError, ValueError):
        return Result(name, False, 0.0, 0, 1, "wrong_answer", [f"expected a number, got {value!r}"])
    if math.isclose(number, q.answer, rel_tol=1e-6):
        return Result(name, True, 1.0, 1, 1)
    for wrong, why in q.wrong.items():
        if math.isclose(number, wrong, rel_tol=1e-6):
            return Result(name, False, 0.0, 0, 1, "wrong_answer", [why])
    ratio = number / q.answer if q.answer else float("inf")
    return Result(name, False, 0.0, 0, 1, "wrong_answer",
                  [f"{value:g} is {ratio:.3g} times the answer: recount the factors of {q.text}"])


def answer(question_id: str, value, *, quiet: bool = False) -> Result:
    """The self-check for a numeric follow-up: prints a pass line or what the wrong answer means."""
    result = grade_answer(question_id, value)
    if not quiet:
        print(result.report())
    return result


def check_answers(answers: dict, *, quiet: bool = False) -> Result:
    """Several follow-ups at once: one Result ("interview_numbers") whose score is the share answered right."""
    results = {q: grade_answer(q, v) for q, v in answers.items()}
    passed = sum(r.passed for r in results.values())
    total = len(results)
    if passed == total:
        result = Result("interview_numbers", True, 1.0, total, total)
    else:
        wrong = [f"{q}: {r.messages[0]}" for q, r in results.items() if not r.passed]
        key = "not_implemented" if all(r.diagnosis == "not_implemented" for r in results.values()) else "wrong_answer"
        result = Result("interview_numbers", False, round(passed / total, 3), passed, total, key,
                        ["not implemented yet: " + "; ".join(wrong) if key == "not_implemented" else wrong[0]]
                        + ([] if key == "not_implemented" else wrong[1:]))
    if not quiet:
        print(result.report())
    return result
