"""The ring kind: a ring of ranks, each stepping the contract's function and passing its K/V chunk on with the
contract's second function (``exchange``). Cases of one step run as the function kind's; a case whose call has
``ranks`` runs the whole ring on that many real processes (``sandbox/kinds/ranks.py``: forked ranks, gloo on
loopback, a deadlock stopped after a few seconds): the call's args are (q, k, v chunks per rank, seq_len, layout,
causal), and the outputs rank<r>.out, rank<r>.lse and rank<r>.recv<t>.k/.v (what rank r received before ring step
t), and the flag rank<r>.p2p (1: its exchanges were point to point with its neighbours, no collective).

Exercise 15 is of this kind."""

from __future__ import annotations

from dataclasses import dataclass

from ..messages import Msg
from . import function

# its texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "label.rank": ("{what} of rank {rank}", "rank {rank} 的{what}"),
    "label.received": (
        "{what} rank {rank} received before ring step {step}",
        "rank {rank} 在第 {step} 步之前收到的{what}",
    ),
    "label.received_k": ("the keys", "键"),
    "label.received_v": ("the values", "值"),
    "compare.not_p2p": (
        "{step}: ring_exchange went through a collective (or a rank other than its two neighbours): a ring passes "
        "each chunk to rank + 1 with point-to-point sends and receives",
        "{step}：ring_exchange 用了集合通信（或与两个邻居之外的 rank 通信）：环是用点对点的发送和接收把每个块传给 "
        "rank + 1",
    ),
}


@dataclass
class Call(function.Call):
    """One call: a step (as the function kind's), or with ``ranks`` the whole ring on that many processes."""

    ranks: int | None = None
    exchange: str | None = None  # the contract's function that passes K/V on (a ring's call)

    @property
    def ring_size(self) -> int:
        """The number of ranks of a ring's call."""
        assert self.ranks is not None, "a ring's call says how many ranks it runs on"
        return self.ranks


class Words(function.Words):
    def label(self, name: str, single: bool):
        step, _, rest = name.partition(".")
        if not step.startswith("rank"):
            return super().label(name, single)
        what, _, kv = rest.partition(".")  # rank<r>.out, rank<r>.recv<t>.k
        if what.startswith("recv"):
            return Msg("label.received", rank=step[4:], step=what[4:], what=Msg("label.received_" + kv))
        return Msg("label.rank", rank=step[4:], what=self.what(what))

    def flag(self, name: str) -> Msg | None:
        step, _, label = name.partition(".")  # rank<r>.p2p: its exchanges point to point with its neighbours
        return Msg("compare.not_p2p", step=step) if step.startswith("rank") and label == "p2p" else super().flag(name)


class Ring(function.Function):
    name = "ring"
    Words = Words

    def expected_names(self, case):
        names = super().expected_names(case)
        for call in case.calls:
            for r in range(call.ranks or 0):  # each rank's result and the chunks it received
                names |= {f"rank{r}.out", f"rank{r}.lse", f"rank{r}.p2p"}
                names |= {f"rank{r}.recv{t}.{kv}" for t in range(1, call.ranks) for kv in "kv"}
        return names

    def called(self, ex, case):
        return case.calls[0].exchange or super().called(ex, case)


KIND = Ring()
