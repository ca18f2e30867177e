"""The child's side of the ring kind: the cases of one step run as the function kind runs them, and the cases of a
whole ring on real processes (``ranks``: forked ranks, gloo on loopback, a deadlock stopped after a few seconds), the
contract's step function and its exchange function (a second function the contract names, beside the first) on every
rank. A ring that deadlocked is not run again: the same ring would deadlock again."""

from __future__ import annotations

from ..errors import ContractError, describe_exception
from . import function, ranks


def run_case(fn, case: dict, learner_files=None) -> dict:
    """One case: a step (the function kind's), or, for a call with ``ranks``, the whole ring."""
    call = case["calls"][0]
    if not call.get("ranks"):
        return function.run_case(fn, case, learner_files)
    record = {"case": case["name"], "error": None, "outputs": {}, "calls": []}
    try:
        exchange = function.helper(fn, call["exchange"])
    except ContractError as exc:
        return {**record, "error": {**describe_exception(exc, learner_files, "forward"), "step": 1}}
    return ranks.run_ring_case(fn, exchange, case, describe_exception, learner_files)


class Ring(function.Function):
    name = "ring"

    def run(self, target, spec, learner_files=None):
        records, deadlocked = [], None
        for case in spec["cases"]:
            if deadlocked is not None and case["calls"][0].get("ranks"):  # the same ring deadlocks again: not rerun
                records.append({"case": case["name"], "error": deadlocked, "outputs": {}, "calls": []})
                continue
            records.append(run_case(target, case, learner_files))
            error = records[-1]["error"]
            deadlocked = error if error is not None and error.get("type") == ranks.DEADLOCK else deadlocked
        return records


KIND = Ring()
