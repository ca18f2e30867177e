"""The child's side of the function kind: the learner's function called on each case's arguments (fresh copies), its
(out, lse) recorded, with what the call wrote into its arguments, the largest tensor it built and how far the process's
memory rose. Never raises for a learner's bug."""

from __future__ import annotations

import torch

from ..errors import ContractError, describe_exception
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


def run_case(fn, case: dict, learner_files=None) -> dict:
    """One case: fn(*args) must return (out, lse); a call naming a ``helper`` calls the contract's other function
    instead (exercise 13's merge_partials). The arguments it writes into (the call's ``state``) are read back."""
    record = {"case": case["name"], "error": None, "outputs": {}, "calls": []}
    call = case["calls"][0]
    try:
        fn = fn if call.get("helper") is None else helper(fn, call["helper"])
        tracker = largest_float_tensor()
        torch.manual_seed(call["seed"])
        args = [_fresh(a) for a in call["args"]]
        with torch.no_grad(), PeakMemory() as peak, tracker:
            result = fn(*args)
        written = {f"step1.{name}": plain(args[index]).double() for name, index in call.get("state") or ()}
        del args  # the state the call wrote into the arguments it was handed, read back above
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            name = fn.__name__ if isinstance(getattr(fn, "__name__", None), str) else said("the_function")
            raise ContractError("function_pair", name=name, type=type(result).__name__)
        record["outputs"] = {"step1.out": plain(result[0]), "step1.lse": plain(result[1]), **written}
        if call.get("tile_bound") is not None:
            tiled = tracker.numel <= call["tile_bound"]
            if call.get("peak_bound") is not None and peak.rise is not None:
                tiled = tiled and peak.rise <= call["peak_bound"]
            record["outputs"]["step1.tiled"] = torch.tensor(1.0 if tiled else 0.0)
        torch.manual_seed(call["seed"] + 1)
        with torch.no_grad():
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
