"""Interview mode's numeric follow-ups, checked: ``answer("kv_cache_bytes", 2 * 32 * ...)`` in a notebook. Each
question names the common wrong answers (a factor of 2 missing, float32 instead of float16, one head only)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .messages import Msg, joined
from .types import Result

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
