"""Runs a submission's cells, then its class on the cases the grader sent, and writes back plain tensors.

It computes no verdict and holds no answer: the grader (in the parent process) drew the cases from a secret
seed and compares what comes back with its own reference. Imports only torch and the standard library, so
that it runs inside the sandbox with nothing of the grader importable.

Sandboxed use: python harness.py PLAN.pt RESULT.pt. In-process use: ``run_exercise`` (the notebooks' check).
"""

from __future__ import annotations

import linecache
import os
import signal
import sys
import traceback

import torch
from torch import nn

try:
    from . import dialects  # in-process: part of the course's grader package
    from .texts import Said, english, said
except ImportError:  # sandboxed: harness.py, dialects.py and texts.py side by side in /grader
    import dialects
    from texts import Said, english, said

# fused attention, as the dispatcher names its ops (aten::scaled_dot_product_attention and its CPU/flash/
# efficient/cuDNN/math kernels, nn.MultiheadAttention's fast path) and as torch names FlexAttention's operator
FUSED_OPS = (
    "scaled_dot_product",
    "flash_attention",
    "efficient_attention",
    "cudnn_attention",
    "multi_head_attention",
    "transformer_encoder_layer",
    "flex_attention",
)
PROFILER_STOPPED = "profiler:stopped"  # what the tracer records when the submission stopped it
MAX_MESSAGE = 1600  # long enough that a list of what is accepted is never cut


class CellTimeout(BaseException):
    """Raised by the alarm inside a learner's cell or forward that runs too long."""


class ContractError(Said):
    """The learner's module does not follow the exercise's contract (names, shapes, return values)."""


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


_NOT_LEARNER = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.dirname(torch.__file__),
    os.path.dirname(os.__file__),
)


def _learner_frame(exc: BaseException, learner_files):
    """The deepest frame in the learner's code: one of ``learner_files``, or (in-process, where the cells'
    file names are IPython's) any frame outside the grader, torch and the standard library."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if learner_files is not None:
            if frame.filename in learner_files:
                return frame
        elif frame.filename.startswith("<") or not os.path.abspath(frame.filename).startswith(_NOT_LEARNER):
            return frame
    return None


def _stub(exc: BaseException) -> bool:
    """A NotImplementedError, or an error raised because of one (Triton's interpreter wraps what a kernel raises
    in its own InterpreterError)."""
    return isinstance(exc, NotImplementedError) or isinstance(exc.__cause__, NotImplementedError)


def describe_exception(exc: BaseException, learner_files=None, where: str = "forward") -> dict:
    """A learner's exception as plain data: type, first line of the message, the learner's line. The grader
    renders ``said`` and ``line_said`` (the harness's own words as keys, see texts.py) in the learner's language."""
    frame = _learner_frame(exc, learner_files)
    line = line_said = None
    if frame is not None:
        src = (frame.line or "").strip()
        line = f"line {frame.lineno}" + (f": {src}" if src else "")[:MAX_MESSAGE]
        line_said = (
            said("at_line", line=str(frame.lineno), src=src) if src else said("at_line_bare", line=str(frame.lineno))
        )
    message_said = (
        said("timed_out")
        if isinstance(exc, CellTimeout)
        else said("out_of_memory")
        if isinstance(exc, MemoryError)
        else getattr(exc, "said", None)
        if isinstance(exc, Said)
        else None
    )
    if message_said is not None:
        message = english(message_said)
    else:
        text = str(exc).strip()
        message = text.splitlines()[0] if text else ""
    return {
        "type": type(exc).__name__,
        "message": message[:MAX_MESSAGE],
        "line": line,
        "where": where,
        "not_implemented": _stub(exc),
        "function": None if frame is None else frame.name,  # the learner's function it came from: which one is a stub
        "contract": isinstance(exc, ContractError),
        "said": message_said,
        "line_said": line_said,
    }


def _fused(name: str) -> bool:
    return any(op in name for op in FUSED_OPS)


class _Traced(torch.Tensor):
    """An input that records the torch functions applied to it and to everything computed from it, in any
    thread: sees nn.MultiheadAttention's Python-level forward, which computes its weights without a fused op.
    Only torch's own functions count: a learner's helper of the same name never reaches this hook."""

    seen: set = set()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "") or ""
        owner = getattr(func, "__module__", "") or ""
        if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):  # torch.ops.<namespace>.<op>
            owner = "torch" if getattr(func, "_qualified_op_name", "").startswith("aten::") else "torch.ops"
        if (
            isinstance(name, str)
            and isinstance(owner, str)
            and _fused(name)
            and owner.startswith("torch")
            and not owner.startswith("torch.ops")
        ):
            cls.seen.add(("F." if owner == "torch.nn.functional" else "") + name)
        return super().__torch_function__(func, types, args, kwargs or {})


class FusedTracer:
    """Records the fused attention a submission runs, where it runs: every operator call that reaches the
    dispatcher in any thread (the profiler's callbacks: eager, TorchScript, torch.library custom ops, vmap,
    compiled graphs, training and eval mode, backward) and every call of torch's higher-order operators
    (FlexAttention). Names in the source mean nothing here; only what executes is seen.

    A submission that stops the profiler is seen too (the profiler is not running when tracing ends)."""

    def __init__(self):
        self.seen: set = set()
        self._hop_call = None

    def __enter__(self):
        from torch._C._profiler import ProfilerActivity, _ExperimentalConfig
        from torch.autograd import ProfilerConfig, ProfilerState, _enable_profiler, _prepare_profiler

        config = ProfilerConfig(
            ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig(profile_all_threads=True)
        )
        activities = {ProfilerActivity.CPU}
        level = os.environ.get(_KINETO_LOG_LEVEL)
        os.environ[_KINETO_LOG_LEVEL] = "6"  # the profiler's library logs its start and stop on stderr unless told
        try:
            _prepare_profiler(config, activities)
            _enable_profiler(config, activities)
        except RuntimeError:  # a profiler the submission left running: ours replaces it
            self._disable()
            _enable_profiler(config, activities)
        finally:
            if level is None:
                os.environ.pop(_KINETO_LOG_LEVEL, None)
            else:
                os.environ[_KINETO_LOG_LEVEL] = level
        hop = torch._ops.HigherOrderOperator
        seen, original = self.seen, hop.__call__
        self._hop_call = original

        def watched(op, *args, **kwargs):
            name = op.name() if callable(getattr(op, "name", None)) else ""
            if isinstance(name, str) and _fused(name):
                seen.add(name)
            return original(op, *args, **kwargs)

        hop.__call__ = watched
        return self

    @staticmethod
    def _disable():
        from torch.autograd import _disable_profiler

        return _disable_profiler()

    def __exit__(self, *exc):
        torch._ops.HigherOrderOperator.__call__ = self._hop_call
        with torch.autograd.profiler.record_function(_END):  # missing from the events if the profiler was stopped
            pass
        try:
            names = {e.name() for e in self._disable().events()}
        except RuntimeError:
            names = set()
        if _END not in names:
            self.seen.add(PROFILER_STOPPED)
        self.seen |= {name for name in names if name.startswith("aten::") and _fused(name)}
        return False


_END = "grader: end of tracing"
_KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"  # read once, when the profiler first starts in a process
_FLEX_SOURCE = os.path.join("torch", "nn", "attention", "flex_attention.py")


def _raised_by_flex(exc: BaseException) -> bool:
    """FlexAttention refused to run (on CPU it has no backward): the learner's code did call it."""
    return any(frame.filename.endswith(_FLEX_SOURCE) for frame in traceback.extract_tb(exc.__traceback__))


def _plain(value):
    """A detached CPU tensor (a plain torch.Tensor), or a description of what came back instead."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").as_subclass(torch.Tensor).clone()
    return f"<{type(value).__name__}>"


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


def _largest_float_tensor():
    """A TorchFunctionMode recording the largest floating-point tensor any torch function returns: a tiled
    computation never builds the full score matrix. (A TorchDispatchMode would import torch._dynamo, seconds
    that count against the sandbox's time limits.)"""
    from torch.overrides import TorchFunctionMode
    from torch.utils import _pytree as pytree

    class Largest(TorchFunctionMode):
        numel = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self.numel = max(self.numel, t.numel())
            return out

    return Largest()


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class PeakMemory:
    """How far the whole process's resident memory rises during a block: every thread, any library (NumPy too),
    measured by the kernel, not by watching the code. Linux: free heap pages are returned first (malloc_trim),
    then the peak (VmHWM) is reset to the current size (clear_refs 5) and read afterwards. ``rise`` stays None
    where that cannot be done (another system)."""

    def __enter__(self):
        import ctypes
        import gc

        self.rise, self.start = None, None
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
            self.start = _status_kib("VmRSS")
        except OSError:
            pass
        return self

    def __exit__(self, *exc):
        peak = _status_kib("VmHWM")
        if self.start is not None and peak is not None:
            self.rise = max(0, peak - self.start) * 1024
        return False


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


def run_function_case(fn, case: dict, learner_files=None) -> dict:
    """A function exercise (the online softmax): fn(*args) must return (out, lse); a call naming a ``helper``
    calls the contract's other function instead."""
    record = {"case": case["name"], "error": None, "outputs": {}, "calls": []}
    call = case["calls"][0]
    try:
        fn = fn if call.get("helper") is None else _helper(fn, call["helper"])
        tracker = _largest_float_tensor()
        torch.manual_seed(call["seed"])
        args = [_fresh(a) for a in call["args"]]
        with torch.no_grad(), PeakMemory() as peak, tracker:
            result = fn(*args)
        written = {f"step1.{name}": _plain(args[index]).double() for name, index in call.get("state") or ()}
        del args  # the state the call wrote into the arguments it was handed, read back above
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            name = fn.__name__ if isinstance(getattr(fn, "__name__", None), str) else said("the_function")
            raise ContractError("function_pair", name=name, type=type(result).__name__)
        record["outputs"] = {"step1.out": _plain(result[0]), "step1.lse": _plain(result[1]), **written}
        if call.get("tile_bound") is not None:
            tiled = tracker.numel <= call["tile_bound"]
            if call.get("peak_bound") is not None and peak.rise is not None:
                tiled = tiled and peak.rise <= call["peak_bound"]
            record["outputs"]["step1.tiled"] = torch.tensor(1.0 if tiled else 0.0)
        torch.manual_seed(call["seed"] + 1)
        with torch.no_grad():
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
    outputs, presents = record["outputs"], {}
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
            torch.manual_seed(call["seed"])
            with torch.set_grad_enabled(call.get("grad") is not None):
                if call.get("tile_bound") is not None:  # MLA's absorbed call: no per-head K/V as large as the bound
                    with _largest_float_tensor() as tracker:
                        out, present, x = _call(caller, call, past)
                    outputs[f"{tag}.{call['bound_label']}"] = torch.tensor(
                        1.0 if tracker.numel <= call["tile_bound"] else 0.0
                    )
                else:
                    out, present, x = _call(caller, call, past)
                outputs[f"{tag}.out"] = _plain(out)
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
        if trace and _raised_by_flex(exc):
            _Traced.seen.add("flex_attention")
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
                        _call(caller, {**first, "grad": None, "x": first["x"].as_subclass(_Traced)}, None)
                except Exception:  # noqa: BLE001 - graded on plain inputs above; this pass only watches
                    pass
        record["calls"] = sorted(_Traced.seen)
        _Traced.seen.clear()
    return record


def run_exercise(cls, plan: dict, learner_files=None) -> list:
    """Records for every case of one exercise's plan (see the grader's ``protocol.plan``). In interview mode
    a class in another dialect than the book's runs on the plan's square cases (d_in = d_out = d_model)."""
    if plan.get("function"):
        return [run_function_case(cls, case, learner_files) for case in plan["cases"]]
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
            settled["recipe"] = dialects.settle_placement(cls, plan.get("probe"), square)
        except Exception:  # noqa: BLE001 - no mapping or placement settled: each case is built by name and says why
            pass
    dialected = bool(plan.get("dialects"))
    if not plan.get("trace"):
        return [
            run_case(cls, ctor_args[i], case, learner_files, False, ctors[i], settled, square, dialected)
            for i, case in enumerate(cases)
        ]
    with FusedTracer() as tracer:  # every call of every case, training and eval mode, backward included
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


# ------------------------------------------------------------------------------------------------------
# the sandboxed child


def defined_modules(namespace: dict) -> list:
    """The nn.Module subclasses the submission defined (not imported), each once, in the order defined."""
    seen = {}
    for value in list(namespace.values()):
        if (
            isinstance(value, type)
            and issubclass(value, nn.Module)
            and value.__module__ == "__main__"
            and id(value) not in seen
        ):
            seen[id(value)] = value
    return list(seen.values())


_ATTENTION_NAMES = ("attention", "attn", "mha")


def _first_error(cls, spec: dict, learner_files=None):
    """Where ``cls`` fails on the first case of ``spec`` ("construct", "load", "forward", ...), "" when it runs,
    None when it cannot even be tried."""
    try:
        record = run_exercise(
            cls,
            {
                **spec,
                "cases": spec["cases"][:1],
                "ctor_args": spec["ctor_args"][:1],
                "ctors": spec.get("ctors", [None])[:1],
                "square_cases": spec.get("square_cases", [])[:1],
                "square_ctors": spec.get("square_ctors", [])[:1],
                "trace": False,
            },
            learner_files,
        )[0]
    except Exception:  # noqa: BLE001 - a class that cannot even be tried does not fit
        return None
    error = record.get("error")
    return "" if error is None else str(error.get("where"))


def _one_of(group: list, base_first: bool):
    """The one class of ``group``, or the one named like attention; with ``base_first``, a class that extends
    another of the group is left out (a follow-up built on the answer is not the answer)."""
    if base_first:
        group = [c for c in group if not any(o is not c and issubclass(c, o) for o in group)]
    named = [c for c in group if any(n in c.__name__.lower() for n in _ATTENTION_NAMES)]
    for candidates in (group, named):
        if len(candidates) == 1:
            return candidates[0]
    return None


def class_in(namespace: dict, spec: dict, learner_files=None):
    """(the class to grade in ``namespace``, the names of the classes found): what ``check("id", globals())``
    grades, in the notebook's kernel and in the sandbox alike. The exercise's own name first (a function
    exercise: that name only). Else, in interview mode, any nn.Module: one defined, that one; several, the one that
    runs the first case, else the one that at least constructs and loads (its error is the candidate's to see).
    Otherwise (a follow-up under another name) only a class that runs the first case: the learner's other classes
    (the MHA a follow-up builds on) are no answer to it. Of several, the one named like attention; else None, and
    the names are listed to the learner."""
    named = namespace.get(spec["class"])
    if isinstance(named, type) or (spec.get("function") and callable(named)):
        return named, [named.__name__]
    interview = bool(spec.get("dialects"))
    found = [] if spec.get("function") else defined_modules(namespace)
    if interview and len(found) == 1:
        return found[0], [found[0].__name__]
    where = {cls: _first_error(cls, spec, learner_files) for cls in found}
    runs = [c for c in found if where[c] == ""]
    constructs = [c for c in found if where[c] is not None and where[c] not in ("construct", "load")]
    for group in (runs, constructs) if interview else (runs,):
        chosen = _one_of(group, base_first=interview)
        if chosen is not None:
            return chosen, [c.__name__ for c in found]
    return None, [c.__name__ for c in found]


def layer_head_answer(value):
    """The capstone's answer: [layer, head] as ints, or a description of what came back instead."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        try:
            return [int(v.__index__()) for v in value]
        except (AttributeError, TypeError, ValueError, RuntimeError):
            pass
    if isinstance(value, torch.Tensor):
        return f"<a tensor of shape {tuple(value.shape)}>"
    return f"<{type(value).__name__}: {str(value)[:40]}>"


def _run_on_model(fn, state: dict, learner_files, timeout: float) -> dict:
    from course_utils.gpt import GPT  # mounted only in the sandbox of this exercise

    record = {"error": None, "answer": None, "calls": []}
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            record["answer"] = layer_head_answer(fn(GPT.from_checkpoint(state).eval()))
    except BaseException as exc:  # noqa: BLE001
        record["error"] = describe_exception(exc, learner_files, "call")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return record


def _alarm(signum, frame):
    raise CellTimeout()


def _get_ipython_stub():
    class _Shell:  # nbconvert exports call get_ipython().run_line_magic(...): nothing to do when grading
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    return _Shell()


def _number_answer(value):
    """An answer as a value the result's restricted unpickler accepts: an int of int64 range, a float or a short
    string (a 9,000-digit int or a str subclass would make the whole result unreadable, zeroing every exercise)."""
    try:
        if isinstance(value, bool):
            return repr(bool(value))
        if isinstance(value, int):
            number = int.__index__(value)
            if -(1 << 63) <= number < 1 << 63:
                return number
            return float(number) if number.bit_length() < 1000 else float("inf") if number > 0 else float("-inf")
        if isinstance(value, float):
            return float.__float__(value)
        if isinstance(value, str):
            return str.__str__(value)[:80]
        return str(repr(value))[:80]
    except Exception:  # noqa: BLE001 - a repr that raises is the learner's
        return "<unreadable answer>"


def main(result_fd: int) -> None:
    """Read the plan from stdin, run the submission, write the result to ``result_fd`` (a pipe)."""
    import io

    plan = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
    sys.stdin.close()
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _alarm)
    timeout = float(plan["cell_timeout"])
    import course_utils.grade as learner_grade  # the learner-side check(): it only records requests

    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "get_ipython": _get_ipython_stub}
    notes, notes_said, learner_files = [], [], set()

    def note(key, **args):
        notes_said.append(said(key, **args))
        notes.append(english(notes_said[-1]))

    for cell in plan["cells"]:
        filename = f"<cell {cell['index']}>"
        linecache.cache[filename] = (len(cell["source"]), None, cell["source"].splitlines(True), filename)
        learner_files.add(filename)
        try:
            code = compile(cell["source"], filename, "exec")
        except SyntaxError as exc:
            note("cell_syntax", cell=str(cell["index"]), message=str(exc.msg), line=str(exc.lineno))
            continue
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(code, namespace)
        except SystemExit:
            note("cell_exit", cell=str(cell["index"]))
        except BaseException as exc:  # noqa: BLE001 - timeouts and learner errors are all reported
            d = describe_exception(exc, learner_files, "cell")
            message = d["said"] or d["message"]
            if d["line"]:
                note("cell_error_line", cell=str(cell["index"]), type=d["type"], message=message, line=d["line_said"])
            else:
                note("cell_error", cell=str(cell["index"]), type=d["type"], message=message)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    requested = {ex: obj for ex, obj in learner_grade.REQUESTS}
    answers = [
        (str(q)[:80], None if v is None else _number_answer(v))  # None: not answered (yet)
        for q, v in learner_grade.ANSWERS[:20]
    ]
    result = {"notes": notes[:50], "notes_said": notes_said[:50], "exercises": {}, "answers": answers}

    def missing(entry, key, **args):
        entry["missing_said"] = said(key, **args)
        entry["missing"] = english(entry["missing_said"])

    for ex, spec in plan["exercises"].items():
        entry = {"missing": None, "records": []}
        result["exercises"][ex] = entry
        cls = requested.get(ex, namespace.get(spec["class"]))
        if isinstance(cls, str):  # check("id", "ClassName")
            cls = namespace.get(cls)
        kind = "function" if spec.get("function") else "class"
        searched = cls if isinstance(cls, dict) else namespace  # check("id", globals()): as it was at the call
        if isinstance(cls, dict) or (spec.get("dialects") and not isinstance(cls, type)):
            signal.setitimer(signal.ITIMER_REAL, timeout)  # interview mode: any nn.Module the file defines
            try:
                cls, found = class_in(searched, spec, learner_files)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if cls is None:
                if found:
                    missing(
                        entry,
                        "no_class_fits" if spec.get("dialects") else "no_class_found",
                        name=spec["class"],
                        found=", ".join(found),
                        exercise=ex,
                    )
                else:
                    missing(
                        entry, "no_module" if spec.get("dialects") else "no_" + kind, name=spec["class"], exercise=ex
                    )
                continue
        if not (callable(cls) if spec.get("function") else isinstance(cls, type)):
            found = defined_modules(namespace)
            if cls is None and found:
                missing(entry, "no_class_found", name=spec["class"], found=", ".join(c.__name__ for c in found))
            else:
                missing(entry, ("no_" if cls is None else "not_") + kind, name=spec["class"])
            continue
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            entry["records"] = run_exercise(cls, spec, learner_files)
        except BaseException as exc:  # noqa: BLE001
            entry["records"] = []
            d = describe_exception(exc, learner_files)
            missing(entry, "stopped", exercise=ex, message=d["said"] or d["message"])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    for ex, spec in plan.get("models", {}).items():  # the capstone: fn(model) -> (layer, head) on trained GPTs
        fn = requested.get(ex, namespace.get(spec["function"]))
        if isinstance(fn, dict):  # check("id", globals())
            fn = fn.get(spec["function"])
        if not callable(fn):
            result["exercises"][ex] = {"missing": None, "records": []}
            missing(result["exercises"][ex], "no_function", name=spec["function"])
            continue
        result["exercises"][ex] = {
            "missing": None,
            "records": [_run_on_model(fn, state, learner_files, timeout) for state in spec["checkpoints"]],
        }
    buffer = io.BytesIO()
    torch.save(result, buffer)
    with os.fdopen(result_fd, "wb") as out:
        out.write(buffer.getvalue())
    os._exit(0)  # no atexit handler or thread of the learner's runs after the result is written


if __name__ == "__main__":
    main(int(sys.argv[2]))
