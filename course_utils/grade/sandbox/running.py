"""Runs the learner's class (or function) on the cases the grader sent and records its outputs as plain tensors:
the grader's parameters loaded by name, each call in its mode with its seed, gradients, the cache passed
from call to call, the calls it makes into fused attention. Never raises for a learner's bug."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

try:  # in-process: part of the course's grader package
    from . import dialects, ranks
    from .errors import ContractError, describe_exception
    from .interpreted import Watched
    from .measuring import PeakMemory, largest_float_tensor
    from .texts import Said, said
    from .tracing import FusedTracer, RefusingFlex, Traced, raised_by_flex
except ImportError:  # sandboxed: the sandbox's files side by side in /grader
    if not TYPE_CHECKING:  # the type checker reads the package's modules, above
        import dialects
        import ranks
        from errors import ContractError, describe_exception
        from interpreted import Watched
        from measuring import PeakMemory, largest_float_tensor
        from texts import Said, said
        from tracing import FusedTracer, RefusingFlex, Traced, raised_by_flex


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


def _plain(value):
    """A detached CPU tensor (a plain torch.Tensor), or a description of what came back instead."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").as_subclass(torch.Tensor).clone()
    return f"<{type(value).__name__}>"


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


def _fresh(a):
    """A copy of a case's argument for the learner to use, with the same storage around it: a view of a longer
    buffer stays a view of a copy of that buffer (what lies past its end is part of the case: exercise 14 fills it
    with NaN, which a load without its mask reads)."""
    if not isinstance(a, torch.Tensor):
        return a
    whole = a.is_contiguous() and a.storage_offset() == 0 and a.untyped_storage().nbytes() == a.nbytes
    if whole or 0 in a.stride():  # a broadcast view (stride 0) becomes a tensor of its own, as clone() makes it
        return a.clone()
    copy = torch.empty(0, dtype=a.dtype, device=a.device)
    return copy.set_(a.untyped_storage().clone(), a.storage_offset(), a.shape, a.stride())


def _helper(fn, name: str):
    """The contract's other function ``name``, defined beside the graded ``fn`` (in its module's globals)."""
    helper = getattr(fn, "__globals__", {}).get(name)
    if not callable(helper):
        raise ContractError("helper_missing", name=name, graded=getattr(fn, "__name__", "?"))
    return helper


class _Split:
    """Whether a call split its keys (``Call.split_check``): while entered, the contract's merge beside ``fn`` (in its
    module's globals, where the graded function looks it up) counts the partials it combines, and the softmaxes run
    are watched for one over all the keys of the longest row at once. ``split`` is False only when the merge never
    combined two partials and such a softmax ran; an inline merge of split chunks is split. Put back on exit."""

    def __init__(self, fn, check):
        name, self.all_keys = check if check else (None, None)
        self.names = getattr(fn, "__globals__", None) if name else None
        self.name, self.merged, self.whole = name, False, False

    @property
    def split(self) -> bool:
        return self.merged or not self.whole

    def __enter__(self):
        if self.name is None:
            return self
        from torch.overrides import TorchFunctionMode

        watch = self

        class Softmaxes(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func in _SOFTMAXES and args and isinstance(args[0], torch.Tensor):
                    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
                    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
                    sizes = [
                        args[0].shape[d] for d in dims if isinstance(d, int) and -args[0].dim() <= d < args[0].dim()
                    ]
                    watch.whole = watch.whole or watch.all_keys in sizes
                return func(*args, **kwargs)

        self.mode = Softmaxes()
        self.mode.__enter__()
        original = self.names.get(self.name) if self.names is not None else None
        if callable(original):

            def merge(outs, *args, **kwargs):
                self.merged = self.merged or _leading(outs) > 1
                return original(outs, *args, **kwargs)

            self.original = original
            self.names[self.name] = merge
        else:
            self.names = None
        return self

    def __exit__(self, *exc):
        if self.name is None:
            return False
        if self.names is not None:
            self.names[self.name] = self.original
        self.mode.__exit__(*exc)
        return False


_SOFTMAXES = (
    torch.softmax,
    torch.log_softmax,
    torch.logsumexp,
    torch.nn.functional.softmax,
    torch.nn.functional.log_softmax,
    torch.Tensor.softmax,
    torch.Tensor.log_softmax,
    torch.Tensor.logsumexp,
    torch.special.softmax,
    torch.special.log_softmax,
    torch.special.logsumexp,
)


def _leading(outs) -> int:
    """How many partials ``outs`` holds: its leading dimension (a tensor), or its length (a list of them)."""
    if isinstance(outs, torch.Tensor):
        return int(outs.shape[0]) if outs.dim() else 0
    return len(outs) if isinstance(outs, (list, tuple)) else 0


def run_function_case(fn, case: dict, learner_files=None) -> dict:
    """A function exercise (the online softmax): fn(*args) must return (out, lse); a call naming a ``helper``
    calls the contract's other function instead."""
    record = {"case": case["name"], "error": None, "outputs": {}, "calls": []}
    call = case["calls"][0]
    if call.get("ranks"):  # the contract's two functions on a ring of real processes (exercise 15)
        try:
            exchange = _helper(fn, call["exchange"])
        except ContractError as exc:
            return {**record, "error": {**describe_exception(exc, learner_files, "forward"), "step": 1}}
        return ranks.run_ring_case(fn, exchange, case, describe_exception, learner_files)
    try:
        fn = fn if call.get("helper") is None else _helper(fn, call["helper"])
        bounded = call.get("tile_bound") is not None  # a tiled function: what it builds is measured
        tracker, peak, split = largest_float_tensor(), PeakMemory(), _Split(fn, call.get("split_check"))
        torch.manual_seed(call["seed"])
        args = [_fresh(a) for a in call["args"]]
        with contextlib.ExitStack() as watching:
            watching.enter_context(torch.no_grad())
            if bounded:  # (the peak collects garbage first: a tenth of a second with torch loaded, more when busy)
                watching.enter_context(peak)
                watching.enter_context(tracker)
            watching.enter_context(Watched())
            watching.enter_context(split)
            result = fn(*args)
        written = {f"step1.{name}": _plain(args[index]).double() for name, index in call.get("state") or ()}
        del args  # the state the call wrote into the arguments it was handed, read back above
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            name = fn.__name__ if isinstance(getattr(fn, "__name__", None), str) else said("the_function")
            raise ContractError("function_pair", name=name, type=type(result).__name__)
        record["outputs"] = {"step1.out": _plain(result[0]), "step1.lse": _plain(result[1]), **written}
        if call.get("split_check"):
            record["outputs"]["step1.split"] = torch.tensor(1.0 if split.split else 0.0)
        if bounded:
            tiled = tracker.numel <= call["tile_bound"]
            if call.get("peak_bound") is not None and peak.rise is not None:
                tiled = tiled and peak.rise <= call["peak_bound"]
            record["outputs"]["step1.tiled"] = torch.tensor(1.0 if tiled else 0.0)
        torch.manual_seed(call["seed"] + 1)
        with torch.no_grad(), Watched():
            again = fn(*[_fresh(a) for a in call["args"]])
        record["outputs"]["repeat.out"] = _plain(again[0]) if isinstance(again, (tuple, list)) else _plain(again)
    except Exception as exc:  # noqa: BLE001 - any learner error becomes a message
        record["error"] = {**describe_exception(exc, learner_files, "forward"), "step": 1}
    return record


def _backward(module, out, x, call, tag, outputs, pmap=None):
    if not isinstance(out, torch.Tensor):
        return  # a tuple or another type: reported with the output itself, not as a missing gradient
    if not out.requires_grad:
        raise _NoGrad("no_gradient")
    grad = call["grad"]
    if tuple(out.shape) != tuple(grad.shape):
        return  # the shape mismatch is reported with the output itself
    (out * grad).sum().backward()
    outputs[f"{tag}.grad.x"] = _plain(x.grad) if x.grad is not None else _plain(torch.zeros_like(x))
    if pmap is not None:
        for name, g in pmap.grads(module).items():
            outputs[f"{tag}.grad.{name}"] = _plain(g)
        return
    for name, p in module.named_parameters():
        outputs[f"{tag}.grad.{name}"] = _plain(p.grad if p.grad is not None else torch.zeros_like(p))


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
                outputs[f"{tag}.out"] = _plain(out)
                if getattr(caller, "output_dropout", False):  # a dropout after the output projection, left out
                    outputs[f"{tag}.out_dropout"] = torch.tensor(1.0)
                if call["use_cache"] is not None:
                    first_name, second_name = case.get("present_names", ("keys", "values"))
                    outputs[f"{tag}.{first_name}"] = None if present is None else _plain(present[0])
                    outputs[f"{tag}.{second_name}"] = None if present is None else _plain(present[1])
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
                outputs["repeat.out"] = _plain(_call(caller, {**first, "grad": None}, None)[0])
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


def run_exercise(cls, plan: dict, learner_files=None) -> list:
    """Records for every case of one exercise's plan (see the grader's ``protocol.plan``). In interview mode
    a class in another dialect than the book's runs on the plan's square cases (d_in = d_out = d_model)."""
    if plan.get("function"):
        records, deadlocked = [], None
        for case in plan["cases"]:
            if deadlocked is not None and case["calls"][0].get("ranks"):  # the same ring deadlocks again: not rerun
                records.append({"case": case["name"], "error": deadlocked, "outputs": {}, "calls": []})
                continue
            records.append(run_function_case(cls, case, learner_files))
            error = records[-1]["error"]
            deadlocked = error if error is not None and error.get("type") == ranks.DEADLOCK else deadlocked
        return records
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
