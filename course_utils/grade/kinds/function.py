"""The function kind: a function the contract names, called on each case's arguments (fresh copies); it returns
(out, lse), or (out, indices) where the indices are an integer tensor by contract (``integer_outputs``). Its own
checks: the memory a call may build (``tile_bound``: its largest tensor; ``peak_bound``: how far the process's memory
may rise), reported as the flag ``step1.tiled``; the arguments it writes into (``state``), read back after the call;
another function of the contract called instead (``helper``, graded on cases of its own).

Exercises 09, 13, 16, 17a and 17b are of this kind, their cases built with ``Call`` below."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import diagnose
from ..messages import Msg
from ..records import MAX_ELEMENTS, described
from . import Kind

# its texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "compare.not_split": (
        "{step}: the keys were not split: a softmax over all the keys of a row, and no merge of two partials",
        "{step}：键没有被切分：对一行的全部键做了 softmax，也没有合并过两个部分结果",
    ),
    "compare.not_tiled": (
        "{step}: not tiled: more memory than tiles need (the full score matrix, or a (block, n_k) "
        "row strip of it, was built); compute the scores one (block_size, block_size) tile at a time",
        "{step}：没有分块：用的内存超出了分块所需（构造了完整的分数矩阵，或其中一整条 (block, n_k) 的"
        "行带）；应当一次只算一个 (block_size, block_size) 的分数分块",
    ),
}


@dataclass
class Call:
    """One call: ``fn(*args)``."""

    args: tuple[Any, ...]
    seed: int = 0
    tile_bound: int | None = None  # the largest float tensor the call may make
    peak_bound: int | None = None  # how far (bytes) the process's peak memory may rise
    state: tuple[tuple[str, int], ...] = ()  # the arguments it writes into: (name, index in args), each read back
    # after the call from the copy the learner's function was handed, as the output step1.<name>
    helper: str | None = None  # the contract's other function called instead, found beside the graded one
    split_check: tuple[str, int] | None = None  # a call that splits its keys (exercise 13): (the contract's merge,
    # found beside the graded function; the keys of the longest row). step1.split = 0 when the call never had the
    # merge combine two partials and ran a softmax (or logsumexp) over that many keys at once
    integer_outputs: tuple[str, ...] = ()  # outputs that are integer tensors by contract (exercise 17a's indices,
    # "step1.lse"): kept, as float64, for the exercise's read_back to compare; a float tensor there is described


class Words(diagnose.Words):
    def flag(self, name: str) -> Msg | None:
        step, _, label = name.partition(".")
        return Msg("compare.not_" + label, step=step) if label in ("tiled", "split") else None

    def bound(self, name: str) -> bool:
        return name.endswith(".tiled")


class Function(Kind):
    name = "function"
    word = "function"
    Words = Words

    def expected_names(self, case):
        names = {"repeat.out", "step1.out", "step1.lse", "step1.tiled"}
        names |= {"step1.split" for call in case.calls if call.split_check}
        return names | {f"step1.{name}" for call in case.calls for name, _ in call.state}

    def called(self, ex, case):
        return case.calls[0].helper or ex.contract

    def resolve(self, graded, raw):
        """As every kind's, the outputs its calls name in ``integer_outputs`` read first: an integer tensor as float64
        (the records keep float tensors only), anything else as a description of what came back."""
        if isinstance(raw, list) and len(raw) == len(graded.cases):
            raw = [_integers_read(rec, _integer_names(case)) for case, rec in zip(graded.cases, raw, strict=True)]
        return super().resolve(graded, raw)


def _integer_names(case) -> set[str]:
    return {name for call in case.calls for name in call.integer_outputs}


def _integers_read(rec, names: set[str]):
    """The child's record ``rec`` (untrusted) with its outputs ``names`` read as integer tensors, where it has any."""
    if not names or not isinstance(rec, dict) or not isinstance(rec.get("outputs"), dict):
        return rec
    outputs = dict(rec["outputs"])
    for name in names & set(outputs):
        value = outputs[name]
        if type(value) is not torch.Tensor:
            continue
        integer = not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool)
        if integer and value.numel() <= MAX_ELEMENTS:  # beyond 2**31 an index is no key either way: kept out of range
            outputs[name] = value.detach().to(torch.int64).clamp(-(1 << 31), 1 << 31).to(torch.float64)
        else:
            outputs[name] = described(value)
    return {**rec, "outputs": outputs}


KIND = Function()
