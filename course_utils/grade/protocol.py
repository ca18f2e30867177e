"""Run a learner's class on the grader's cases: construct it from the contract, load the grader's
parameters (never buffers), call it in eval mode, and collect plain tensors for the verdict.

The same code runs in-process (``check``) and in the sandboxed child of the CLI; the verdict is computed
elsewhere (``diagnose``) from what this returns.
"""
from __future__ import annotations

import os
import sys
import traceback

import torch
from torch import nn

from . import specs_beyond
from .specs import CONTRACT_ARGS, Case, param_shapes

_COURSE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_GRADE_DIR = os.path.dirname(os.path.abspath(__file__))
# course_utils modules whose use counts as delegating to the reference (data, device, viz are fine)
_REFERENCE_FILES = {os.path.join(_COURSE_DIR, f) for f in
                    ("attention.py", "multihead.py", "kv_cache.py", "masks.py", "interop.py",
                     "rotary.py", "online_softmax.py", "mla.py")}
_MHA_CODES = {nn.MultiheadAttention.forward.__code__, torch.nn.functional.multi_head_attention_forward.__code__}


class ContractError(Exception):
    """The learner's module does not follow the exercise's contract (names, shapes, return values)."""


def _shape(t):
    return "(" + ", ".join(str(s) for s in t) + ")"


def load_params(module: nn.Module, params: dict, exercise: str, cfg: dict) -> None:
    """Copy the grader's parameters into ``module`` by name, strictly; ContractError names a mismatch."""
    if not isinstance(module, nn.Module):
        raise ContractError(f"the class must be an nn.Module, got {type(module).__name__}")
    own = dict(module.named_parameters())
    problems = []
    for name, value in params.items():
        if name not in own:
            layer = name.rsplit(".", 1)[0]
            kind = "bias" if name.endswith(".bias") else "weight"
            problems.append(f"the contract needs a parameter {name} ({layer} as an nn.Linear with a {kind}); "
                            f"your module has none")
        elif tuple(own[name].shape) != tuple(value.shape):
            problems.append(f"{name} has shape {_shape(own[name].shape)} but the contract needs "
                            f"{_shape(value.shape)}")
    extra = sorted(set(own) - set(params))
    if extra:
        problems.append("parameters the contract does not have: " + ", ".join(extra)
                        + (" (is qkv_bias ignored?)" if any(e.endswith(".bias") for e in extra) else ""))
    if problems:
        raise ContractError("; ".join(problems[:3]))
    with torch.no_grad():
        for name, value in params.items():
            own[name].copy_(value)


def learner_line(exc: BaseException, learner_files: set | None = None):
    """'file, line N: source' of the deepest traceback frame in the learner's code, or None."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        fname = os.path.abspath(frame.filename) if not frame.filename.startswith("<") else frame.filename
        if learner_files is not None and frame.filename in learner_files:
            return frame
        if learner_files is None and not (fname.startswith(_GRADE_DIR) or fname.startswith(os.path.dirname(torch.__file__))
                                          or "/lib/python" in fname and "site-packages" not in fname):
            return frame
    return None


def describe_exception(exc: BaseException, learner_files: set | None = None, where: str = "forward") -> dict:
    frame = learner_line(exc, learner_files)
    line = None
    if frame is not None:
        src = (frame.line or "").strip()
        line = f"line {frame.lineno}" + (f": {src}" if src else "")
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return {"type": type(exc).__name__, "message": message[:300], "line": line, "where": where,
            "not_implemented": isinstance(exc, NotImplementedError),
            "contract": isinstance(exc, ContractError)}


class CallRecorder:
    """Records calls into course_utils' reference code, SDPA and nn.MultiheadAttention while active."""

    def __init__(self):
        self.calls: set[str] = set()

    def _profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename in _REFERENCE_FILES:
                self.calls.add(f"course_utils.{os.path.basename(code.co_filename)[:-3]}.{code.co_name}")
            elif code in _MHA_CODES:
                self.calls.add("nn.MultiheadAttention")
        elif event == "c_call" and getattr(arg, "__name__", "") == "scaled_dot_product_attention":
            self.calls.add("F.scaled_dot_product_attention")

    def __enter__(self):
        self._old = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        try:
            sys.setprofile(self._old)
        except TypeError:  # a C-level profiler (cProfile) cannot be restored from Python
            sys.setprofile(None)
        return False


def _to_plain(value):
    """A tensor (detached, float, cpu) or a description string for anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").clone()
    return f"<{type(value).__name__}>"


def _call(module, case: Case, seed: int, progress=None) -> dict:
    progress = {} if progress is None else progress
    torch.manual_seed(seed)
    if case.steps is None:
        out = module(case.x.clone())
        return {"out": _to_plain(out)}
    outs, past = {}, None
    for i, (start, end, use_cache, pass_past) in enumerate(case.steps):
        tag = f"step{i + 1}"
        progress["step"] = i + 1
        result = module(case.x[:, start:end].clone(), past_key_value=past if pass_past else None,
                        use_cache=use_cache)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise ContractError(f"forward must return (out, present), got {type(result).__name__}")
        out, present = result
        outs[tag + ".out"] = _to_plain(out)
        if present is None:
            outs[tag + ".keys"] = outs[tag + ".values"] = None
        elif isinstance(present, (tuple, list)) and len(present) == 2:
            outs[tag + ".keys"], outs[tag + ".values"] = _to_plain(present[0]), _to_plain(present[1])
        else:
            raise ContractError(f"present must be None or a tuple (keys, values), got {type(present).__name__}")
        if use_cache:
            past = present
    return outs


def run_case(cls, exercise: str, case: Case, learner_files: set | None = None) -> dict:
    """Everything the verdict needs about one case; never raises for learner bugs."""
    if exercise in specs_beyond.EXERCISES:  # hook: exercises 08-10 have their own calling conventions
        return specs_beyond.run_case(cls, exercise, case, learner_files)
    record = {"case": case.name, "error": None, "outputs": None, "repeat_differs": False, "calls": []}
    recorder = CallRecorder()
    try:
        with recorder:
            args = [case.ctor[a] for a in CONTRACT_ARGS[exercise]]
            try:
                module = cls(*args)
            except Exception as exc:  # noqa: BLE001 - any learner error becomes a message
                record["error"] = describe_exception(exc, learner_files, "construct")
                return record
            try:
                load_params(module, case.params, exercise, case.ctor)
                module.eval()
            except Exception as exc:  # noqa: BLE001
                record["error"] = describe_exception(exc, learner_files, "load")
                try:  # a stub has no parameters yet: say "not implemented" rather than "missing W_query"
                    with torch.no_grad():
                        _call(module, case, seed=0)
                except NotImplementedError as stub:
                    record["error"] = describe_exception(stub, learner_files, "forward")
                except Exception:  # noqa: BLE001 - keep the contract message
                    pass
                return record
            try:
                progress = {"step": 1}
                with torch.no_grad():
                    first = _call(module, case, seed=1234, progress=progress)
                    second = _call(module, case, seed=4321)
            except Exception as exc:  # noqa: BLE001
                record["error"] = describe_exception(exc, learner_files, "forward")
                record["error"]["step"] = progress["step"]
                return record
        record["outputs"] = first
        record["repeat_differs"] = any(
            isinstance(a, torch.Tensor) and isinstance(second.get(k), torch.Tensor) and a.shape == second[k].shape
            and not torch.equal(torch.nan_to_num(a), torch.nan_to_num(second[k])) for k, a in first.items())
    finally:
        record["calls"] = sorted(recorder.calls)
    return record


def run_exercise(cls, exercise: str, cases: list[Case], learner_files: set | None = None) -> list[dict]:
    return [run_case(cls, exercise, case, learner_files) for case in cases]


def class_delegation(cls, exercise: str) -> str | None:
    """Why ``cls`` is course_utils' reference (or, in interview mode, nn.MultiheadAttention), else None."""
    if not isinstance(cls, type):
        return None
    for base in cls.__mro__:
        module = getattr(base, "__module__", "") or ""
        if module.startswith("course_utils") and not module.startswith("course_utils.grade"):
            return f"{cls.__name__} is (or subclasses) course_utils' {base.__name__}"
        if base is nn.MultiheadAttention:
            return f"{cls.__name__} subclasses nn.MultiheadAttention"
    forward = getattr(cls, "forward", None)
    fmod = getattr(forward, "__module__", "") or ""
    if fmod.startswith("course_utils") and not fmod.startswith("course_utils.grade"):
        return f"{cls.__name__}.forward comes from {fmod}"
    return None
