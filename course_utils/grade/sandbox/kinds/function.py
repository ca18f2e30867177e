"""The child's side of the function kind: the learner's function called on each case's arguments (fresh copies), its
(out, lse) recorded, with what the call wrote into its arguments, the largest tensor it built and how far the process's
memory rose (where a bound is asked), whether it split its keys (where a check is asked), a Triton kernel's memory
accesses watched (``interpreted``). Never raises for a learner's bug."""

from __future__ import annotations

import contextlib

import torch

from ..errors import ContractError, describe_exception
from ..interpreted import Watched
from ..measuring import PeakMemory, largest_float_tensor
from ..texts import said
from . import Kind, plain


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


def helper(fn, name: str):
    """The contract's other function ``name``, defined beside the graded ``fn`` (in its module's globals)."""
    helper = getattr(fn, "__globals__", {}).get(name)
    if not callable(helper):
        raise ContractError("helper_missing", name=name, graded=getattr(fn, "__name__", "?"))
    return helper


class _Split:
    """Whether a call split its keys (a call's ``split_check``): while entered, the contract's merge beside ``fn`` (in
    its module's globals, where the graded function looks it up) counts the partials it combines, and the softmaxes
    run are watched for one over all the keys of the longest row at once. ``split`` is False only when the merge
    never combined two partials and such a softmax ran; an inline merge of split chunks is split. Put back on exit."""

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
                    rank = args[0].dim()
                    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
                    sizes = [args[0].shape[d] for d in dims if isinstance(d, int) and -rank <= d < rank]
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


def run_case(fn, case: dict, learner_files=None) -> dict:
    """One case: fn(*args) must return (out, lse); a call naming a ``helper`` calls the contract's other function
    instead (exercise 13's merge_partials). The arguments it writes into (the call's ``state``) are read back."""
    record = {"case": case["name"], "error": None, "outputs": {}, "calls": []}
    call = case["calls"][0]
    try:
        fn = fn if call.get("helper") is None else helper(fn, call["helper"])
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
        written = {f"step1.{name}": plain(args[index]).double() for name, index in call.get("state") or ()}
        del args  # the state the call wrote into the arguments it was handed, read back above
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            name = fn.__name__ if isinstance(getattr(fn, "__name__", None), str) else said("the_function")
            raise ContractError("function_pair", name=name, type=type(result).__name__)
        record["outputs"] = {"step1.out": plain(result[0]), "step1.lse": plain(result[1]), **written}
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
        record["outputs"]["repeat.out"] = plain(again[0]) if isinstance(again, (tuple, list)) else plain(again)
    except Exception as exc:  # noqa: BLE001 - any learner error becomes a message
        record["error"] = {**describe_exception(exc, learner_files, "forward"), "step": 1}
    return record


class Function(Kind):
    """A function the contract names, called on each case's arguments."""

    name = "function"
    word = "function"

    def fits(self, target):
        return callable(target)

    def run(self, target, spec, learner_files=None):
        return [run_case(target, case, learner_files) for case in spec["cases"]]


KIND = Function()
