"""The verdict: compare the learner's outputs with the reference, and name the mistake by matching them
against the catalogue of mutants run on the same parameters and inputs."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from . import specs

RTOL, ATOL = 1e-4, 1e-5


@dataclass
class Result:
    """A grading result; truthy when every check passed."""
    exercise: str
    passed: bool
    score: float
    checks_passed: int
    checks_total: int
    diagnosis: str | None = None   # a key such as 'scale_d_out', 'not_implemented', 'exception', ...
    messages: list = field(default_factory=list)

    def __bool__(self):
        return self.passed

    @property
    def summary(self) -> str:
        if self.passed:
            return f"✅ {self.exercise}: all {self.checks_total} checks passed"
        first = self.messages[0] if self.messages else "failed"
        return f"❌ {self.exercise}: {self.checks_passed}/{self.checks_total} checks passed: {first}"

    def report(self) -> str:
        return "\n".join([self.summary] + [f"   {m}" for m in self.messages[1:]])

    def __str__(self):
        return self.report()

    def _repr_pretty_(self, p, cycle):  # IPython shows the summary, not a dataclass dump
        p.text(self.report())

    def to_dict(self) -> dict:
        return asdict(self)


def _close(a, b) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=RTOL, atol=ATOL, equal_nan=True)


def _shape(t):
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


_WHAT = {"out": "the output", "keys": "present keys", "values": "present values"}


def compare(learner: dict, expected: dict) -> str | None:
    """None when the learner's outputs match, else a one-line reason."""
    for name, exp in expected.items():
        got = learner.get(name)
        step, _, part = name.rpartition(".")
        label = (f"{step}: " if step else "") + _WHAT.get(part, part)
        if exp is None:
            if got is not None:
                return f"{label} must be None when use_cache=False"
            continue
        if got is None:
            return f"{label} is None, expected a tensor of shape {_shape(exp)}"
        if not isinstance(got, torch.Tensor):
            return f"{label} is {got}, expected a tensor of shape {_shape(exp)}"
        if got.shape != exp.shape:
            extra = " ([b, num_heads, n_past + n_new, head_dim])" if part in ("keys", "values") else ""
            return f"{label} has shape {_shape(got)} but the contract needs {_shape(exp)}{extra}"
        if not _close(got, exp):
            if torch.isnan(got).any() and not torch.isnan(exp).any():
                return f"{label} contains NaN"
            diff = (got.double() - exp.double()).abs().nan_to_num(float("inf")).max().item()
            return f"{label} differs from the reference (max abs difference {diff:.3g})"
    return None


def _matches(exercise, cases, records, mutant) -> bool:
    for case, rec in zip(cases, records):
        exp = specs.cached_outputs(exercise, case, mutant.variant)
        if isinstance(exp, Exception):  # a mutant that crashes matches a learner that crashes there
            err = rec["error"]
            if err is None or err["where"] != "forward" or err.get("step", 1) != getattr(exp, "step", 1):
                return False
            continue
        if rec["error"] is not None or compare(rec["outputs"], exp) is not None:
            return False
    return True


def _error_line(err: dict) -> str:
    where = {"construct": "constructing the module", "load": "loading the grader's parameters",
             "forward": "forward"}[err["where"]]
    if err["contract"]:
        return f"contract: {err['message']}"
    text = f"{err['type']} in {where}: {err['message']}"
    return text + (f" (your {err['line']})" if err["line"] else "")


def total_checks(cases) -> int:
    """One check per case, plus one: the module is deterministic in eval mode."""
    return len(cases) + 1


def verdict(exercise: str, records: list, cases=None, refusals: list | None = None) -> Result:
    """Grade ``records`` (from protocol.run_exercise) against the reference and the mutant catalogue."""
    cases = specs.make_cases(exercise) if cases is None else cases
    total = total_checks(cases)
    refusals = list(refusals or [])
    interview = exercise in specs.INTERVIEW
    for rec in records:
        for call in rec.get("calls", []):
            if call.startswith("course_utils"):
                refusals.append(f"calls course_utils' reference code ({call})")
            elif interview:
                refusals.append(f"uses {call}, which interview mode does not allow")
    if refusals:
        refusals = list(dict.fromkeys(refusals))
        key = "forbidden" if interview and not any("course_utils" in r for r in refusals) else "delegates"
        head = ("no credit: interview mode (手撕MHA) asks for the computation by hand, without "
                "F.scaled_dot_product_attention, nn.MultiheadAttention or course_utils" if key == "forbidden"
                else "no credit: the submission delegates to course_utils' reference implementation")
        return Result(exercise, False, 0.0, 0, total, key, [head + ": " + refusals[0]] + refusals[1:])

    expected = [specs.cached_outputs(exercise, c, specs.correct_variant(exercise)) for c in cases]
    reasons = []
    for case, rec, exp in zip(cases, records, expected):
        if rec["error"] is not None:
            reasons.append((case.name, _error_line(rec["error"])))
        else:
            why = compare(rec["outputs"], exp)
            if why is not None:
                reasons.append((case.name, why))
    nondeterministic = any(r["repeat_differs"] for r in records)
    ran = any(r["error"] is None for r in records)  # determinism is only a check when something ran
    passed = len(cases) - len(reasons) + (1 if ran and not nondeterministic else 0)
    if passed == total:
        return Result(exercise, True, 1.0, total, total, None, [])
    score = round(passed / total, 3)
    details = [f"case '{name}': {why}" for name, why in reasons]

    errors = [r["error"] for r in records if r["error"] is not None]
    if any(e["not_implemented"] for e in errors):
        return Result(exercise, False, 0.0, 0, total, specs.NOT_IMPLEMENTED,
                      [f"not implemented yet: write {specs.CONTRACT_CLASS[exercise]} (it raises "
                       "NotImplementedError)"])
    if nondeterministic:
        return Result(exercise, False, score, passed, total, specs.DROPOUT_EVAL[0],
                      [specs.DROPOUT_EVAL[1]] + details)
    for mutant in specs.mutants(exercise):
        if _matches(exercise, cases, records, mutant):
            return Result(exercise, False, score, passed, total, mutant.key, [mutant.message] + details)
    if errors and errors[0]["contract"]:
        return Result(exercise, False, score, passed, total, "contract", [_error_line(errors[0])] + details)
    if errors:
        return Result(exercise, False, score, passed, total, "exception", [_error_line(errors[0])] + details)
    if any("shape" in why for _, why in reasons):
        return Result(exercise, False, score, passed, total, "wrong_shape",
                      ["wrong output shape: " + next(w for _, w in reasons if "shape" in w)] + details)
    return Result(exercise, False, score, passed, total, "wrong_values",
                  ["outputs differ from the reference, and match no known mistake; compare your steps with "
                   "the notebook's"] + details)


def failure(exercise: str, key: str, message: str) -> Result:
    """A result for a submission that could not be run at all (syntax error, timeout, missing class...)."""
    from . import specs_capstone  # capstone hook (imported here: specs_capstone imports this module)
    if exercise in specs_capstone.EXERCISES:
        return Result(exercise, False, 0.0, 0, specs_capstone.total_checks(exercise), key, [message])
    return Result(exercise, False, 0.0, 0, len(specs.make_cases(exercise)) + 1, key, [message])
