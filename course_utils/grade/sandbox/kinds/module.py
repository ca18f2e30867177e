"""The child's side of the module kind: the learner's nn.Module class, built with the case's constructor arguments,
loaded with the grader's parameters by name (or, in interview mode, by role and shape in any dialect), and called in
each mode with its seed, the cache passed from call to call, gradients, the calls it makes into fused attention.
Never raises for a learner's bug."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from .. import dialects
from ..errors import ContractError, describe_exception
from ..measuring import largest_float_tensor
from ..texts import Said, said
from ..tracing import FusedTracer, RefusingFlex, Traced, raised_by_flex
from . import Kind, plain


def _shape(t):
    return "(" + ", ".join(str(s) for s in t) + ")"


def load_params(module, params: dict) -> None:
    """Copy the grader's parameters into ``module`` by name, strictly; ContractError names every mismatch."""
    if not isinstance(module, nn.Module):
        raise ContractError("not_module", type=type(module).__name__)
    own = dict(module.named_parameters())
    problems = []
    for name, value in params.items():
        if name not in own:
            layer = name.rsplit(".", 1)[0]
            kind = "bias" if name.endswith(".bias") else "weight"
            problems.append(said("param_missing", name=name, layer=layer, kind=kind))
        elif tuple(own[name].shape) != tuple(value.shape):
            problems.append(said("param_shape", name=name, got=_shape(own[name].shape), need=_shape(value.shape)))
    extra = sorted(set(own) - set(params))
    if extra:
        problems.append(
            said(
                "param_extra_bias" if any(e.endswith(".bias") for e in extra) else "param_extra", names=", ".join(extra)
            )
        )
    if problems:
        shown = said("list.semicolon", items=problems[:4])
        if len(problems) > 4:
            raise ContractError("problems_more", problems=shown, count=str(len(problems) - 4))
        raise ContractError(shown["key"], **shown["args"])
    with torch.no_grad():
        for name, value in params.items():
            own[name].copy_(value)


def _rescaled(past, scales):
    """The module's own cache with each part multiplied by its scale (whatever its layout): a past it did not produce.
    Parts that are not tensors are handed back as they are (the comparison of what it returned says what is wrong)."""
    if not (isinstance(past, (tuple, list)) and len(past) == 2):
        return past
    parts = zip(past, scales, strict=True)
    return tuple(part * scale if isinstance(part, torch.Tensor) else part for part, scale in parts)


def _call(module, call: dict, past):
    x = call["x"].clone()
    if call.get("grad") is not None:
        x.requires_grad_(True)
    if call["use_cache"] is None and not call.get("kwargs"):
        out = module(x)
        if isinstance(module, dialects.Caller) and isinstance(out, (tuple, list)) and out:
            out = out[0]  # (output, attention weights), as many candidates return
        return out, None, x
    result = module(x, past_key_value=past, use_cache=bool(call["use_cache"]), **call.get("kwargs", {}))
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise ContractError("forward_pair", type=type(result).__name__)
    out, present = result
    if present is not None and not (isinstance(present, (tuple, list)) and len(present) == 2):
        first, second = call.get("present_names", ("keys", "values"))
        raise ContractError("present_pair", first=first, second=second, type=type(present).__name__)
    return out, present, x


def _backward(module, out, x, call, tag, outputs, pmap=None):
    if not isinstance(out, torch.Tensor):
        return  # a tuple or another type: reported with the output itself, not as a missing gradient
    if not out.requires_grad:
        raise _NoGrad("no_gradient")
    grad = call["grad"]
    if tuple(out.shape) != tuple(grad.shape):
        return  # the shape mismatch is reported with the output itself
    (out * grad).sum().backward()
    outputs[f"{tag}.grad.x"] = plain(x.grad) if x.grad is not None else plain(torch.zeros_like(x))
    if pmap is not None:
        for name, g in pmap.grads(module).items():
            outputs[f"{tag}.grad.{name}"] = plain(g)
        return
    for name, p in module.named_parameters():
        outputs[f"{tag}.grad.{name}"] = plain(p.grad if p.grad is not None else torch.zeros_like(p))


class _NoGrad(Said):
    pass


def _dialect_module(cls, case, ctor, record, settled: dict, square: bool = True):
    """Build, load and wrap a candidate's MHA written in its own dialect (interview mode): built with the
    constructor mapping and loaded by the placement the probe settled (``dialects.settle_placement``), else by name.
    The mask convention is settled on the first case and kept for the others (``settled``)."""
    recipe = settled.get("recipe")
    if recipe is None:  # no probe settled a mapping: by name, as the grader always did
        module, name = dialects.build(cls, ctor, square)
        said_map = None
    else:
        module, name, said_map = dialects.build_mapped(cls, ctor, recipe.mapping, square)
    placement = dialects.placement_for(module, ctor, square, recipe)
    no_bias = placement.load(module, case["params"])
    caller = dialects.Caller(module)
    if "mask" not in settled:
        settled["mask"] = caller.settle(case["calls"][0]["x"])
        settled["how"] = caller.kind, caller.shape
    caller.kind, caller.shape = settled["how"]
    record["dialect"] = {
        "name": name,
        "mask": settled["mask"],
        "no_bias": no_bias,
        "square": square,
        "ctor": said_map,
        "placement": placement.label,
    }
    return module, caller, placement


def run_case(
    cls,
    ctor_args: list,
    case: dict,
    learner_files=None,
    trace: bool = False,
    ctor=None,
    settled=None,
    square: bool = True,
    unwrap: bool = False,
) -> dict:
    """Everything the verdict needs about one case, as plain data; never raises for learner bugs.
    With ``ctor`` (the constructor's values by name), the class may be written in any interview dialect."""
    record = {"case": case["name"], "error": None, "outputs": {}, "calls": []}
    pmap = None
    try:
        if ctor is not None:
            module, caller, pmap = _dialect_module(cls, case, ctor, record, {} if settled is None else settled, square)
        else:
            module = caller = cls(*ctor_args)
            if unwrap:  # interview mode: the book's class may return (out, attention weights)
                caller = dialects.Caller(module)
    except dialects.DialectError as exc:
        record["error"] = {**describe_exception(exc, learner_files, "load"), "contract": True}
        return record
    except Exception as exc:  # noqa: BLE001 - any learner error becomes a message
        record["error"] = describe_exception(exc, learner_files, "construct")
        return record
    try:
        if pmap is None:
            load_params(module, case["params"])
    except Exception as exc:  # noqa: BLE001
        record["error"] = describe_exception(exc, learner_files, "load")
        try:  # a stub has no parameters yet: say "not implemented" rather than "missing W_query"
            with torch.no_grad():
                _call(module, case["calls"][0], None)
        except NotImplementedError as stub:
            record["error"] = describe_exception(stub, learner_files, "forward")
        except Exception:  # noqa: BLE001 - keep the contract message
            pass
        return record
    outputs = record["outputs"]
    presents: dict[int, Any] = {}  # call index -> the cache it returned, for a later call's past
    step = 0
    try:
        for step, call in enumerate(case["calls"], start=1):
            tag = f"step{step}"
            module.train(bool(call["train"]))
            past = (
                presents.get(call["past"])
                if isinstance(call["past"], int)
                else case.get("given_past")
                if call["past"] == "given"
                else None
            )
            if call.get("past_scale") is not None:
                past = _rescaled(past, call["past_scale"])
            torch.manual_seed(call["seed"])
            with torch.set_grad_enabled(call.get("grad") is not None):
                if call.get("tile_bound") is not None:  # MLA's absorbed call: no per-head K/V as large as the bound
                    with largest_float_tensor() as tracker:
                        out, present, x = _call(caller, call, past)
                    outputs[f"{tag}.{call['bound_label']}"] = torch.tensor(
                        1.0 if tracker.numel <= call["tile_bound"] else 0.0
                    )
                else:
                    out, present, x = _call(caller, call, past)
                outputs[f"{tag}.out"] = plain(out)
                if getattr(caller, "output_dropout", False):  # a dropout after the output projection, left out
                    outputs[f"{tag}.out_dropout"] = torch.tensor(1.0)
                if call["use_cache"] is not None:
                    first_name, second_name = case.get("present_names", ("keys", "values"))
                    outputs[f"{tag}.{first_name}"] = None if present is None else plain(present[0])
                    outputs[f"{tag}.{second_name}"] = None if present is None else plain(present[1])
                    presents[step - 1] = present
                if call.get("grad") is not None:
                    try:
                        _backward(module, out, x, call, tag, outputs, pmap)
                    except _NoGrad as exc:
                        record["error"] = {**describe_exception(exc, learner_files, "backward"), "step": step}
                        return record
        first = case["calls"][0]
        if first["past"] is None and not first["train"]:  # eval mode must be deterministic
            module.eval()
            torch.manual_seed(first["seed"] + 1)
            with torch.no_grad():
                outputs["repeat.out"] = plain(_call(caller, {**first, "grad": None}, None)[0])
    except Exception as exc:  # noqa: BLE001
        record["error"] = {**describe_exception(exc, learner_files, "forward"), "step": step}
        if trace and raised_by_flex(exc):
            Traced.seen.add("flex_attention")
    except BaseException:  # a timeout: no more calls into the learner's code
        trace = False
        raise
    finally:
        if trace:  # one more forward in each mode on an input that records torch's functions, even after an error
            first = case["calls"][0]
            for training in (False, True):
                try:
                    module.train(training)
                    with torch.no_grad():
                        _call(caller, {**first, "grad": None, "x": first["x"].as_subclass(Traced)}, None)
                except Exception:  # noqa: BLE001 - graded on plain inputs above; this pass only watches
                    pass
        record["calls"] = sorted(Traced.seen)
        Traced.seen.clear()
    return record


def run(cls, plan: dict, learner_files=None) -> list:
    """Records for every case of one exercise's plan (see the grader's ``kinds/module.py``). In interview mode
    a class in another dialect than the book's runs on the plan's square cases (d_in = d_out = d_model)."""
    cases, ctor_args, ctors = plan["cases"], plan["ctor_args"], [None] * len(plan["cases"])
    square = True
    if plan.get("dialects") and not _is_book(cls, plan):
        if dialects.takes_in_and_out(cls) and plan.get("ctors"):  # d_in and d_out by name: the book's cases
            ctors, square = plan["ctors"], False
        else:
            cases, ctors = plan["square_cases"], plan["square_ctors"]
        ctor_args = [None] * len(cases)
    settled: dict = {}
    if ctors[0] is not None:  # interview mode, another dialect: place by role and shape where names do not
        try:
            with RefusingFlex() if plan.get("trace") else contextlib.nullcontext():
                settled["recipe"] = dialects.settle_placement(cls, plan.get("probe"), square)
        except Exception:  # noqa: BLE001 - no mapping or placement settled: each case is built by name and says why
            pass
    dialected = bool(plan.get("dialects"))
    if not plan.get("trace"):
        return [
            run_case(cls, ctor_args[i], case, learner_files, False, ctors[i], settled, square, dialected)
            for i, case in enumerate(cases)
        ]
    with RefusingFlex(), FusedTracer() as tracer:  # every call of every case, training and eval mode, backward
        records = [
            run_case(cls, ctor_args[i], case, learner_files, True, ctors[i], settled, square, dialected)
            for i, case in enumerate(cases)
        ]
    for record in records:
        record["calls"] = sorted(set(record["calls"]) | tracer.seen)
    return records


def _is_book(cls, plan=None) -> bool:
    """The book's contract, loaded strictly by parameter name: a stub, or (in interview mode) a class with the
    book's constructor whose parameters are the book's nn.Linear layers."""
    params = dialects._params(cls.__init__)
    if any(p.kind == p.VAR_POSITIONAL for p in params):  # (*args, **kwargs): a stub; the book's contract
        return True
    if not {"d_in", "d_out", "num_heads"} <= {p.name for p in params}:
        return False
    if plan is None or not plan.get("ctor_args"):
        return True
    try:  # bare matrices or other names under the book's signature are mapped like any other dialect
        names = {n for n, _ in cls(*plan["ctor_args"][0]).named_parameters()}
    except Exception:  # noqa: BLE001 - the constructor's own error is reported when the case runs
        return True
    return names <= set(plan["cases"][0]["params"])


def try_first(cls, plan: dict, learner_files=None) -> dict:
    """The record of ``cls`` on the plan's first case alone, untraced: does it construct, load and run?"""
    first = {
        **plan,
        "cases": plan["cases"][:1],
        "ctor_args": plan["ctor_args"][:1],
        "ctors": plan.get("ctors", [None])[:1],
        "square_cases": plan.get("square_cases", [])[:1],
        "square_ctors": plan.get("square_ctors", [])[:1],
        "trace": False,
    }
    return run(cls, first, learner_files)[0]


class Module(Kind):
    name = "module"

    def run(self, target, spec, learner_files=None):
        return run(target, spec, learner_files)

    def try_first(self, target, spec, learner_files=None):
        return try_first(target, spec, learner_files)


KIND = Module()
