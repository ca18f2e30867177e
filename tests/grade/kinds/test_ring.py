"""The ring kind (kinds/ring.py, sandbox/kinds/ring.py and ranks.py): a ring of real processes, stopped after a
bounded wait and said to be deadlocked (every rank idle in its exchange), stuck (a rank computing) or broken (a rank
whose function breaks its contract), on loopback only; tried through exercise 15, the ring's exercise."""

import pytest

from tests.conftest import grade
from tests.grader_cases.ring_attention import DEADLOCKS, REFERENCE, RING_STEP

EX = "ring_attention"


@pytest.mark.parametrize("style", sorted(DEADLOCKS))
def test_a_ring_that_deadlocks_is_named_after_a_bounded_wait(style):
    """Every rank blocked in its first send (or receive): the ranks are stopped and the mistake is named; the
    first ring's deadlock stands for the second's (not waited for again)."""
    result = grade(EX, DEADLOCKS[style])
    assert not result and result.diagnosis == "ring_deadlock", result.report()
    assert result.checks_passed == 11 and "still inside ring_exchange" in result.report()


def test_a_rank_that_loops_is_stuck_not_deadlocked():
    """A rank spinning inside its exchange (it uses the CPU; a deadlocked rank waits idle) is stopped after the same
    bounded wait and said to be computing, not deadlocked; the ring of 2 processes, without the loop, passes."""
    exchange = REFERENCE[REFERENCE.index("def ring_exchange") :].split("\n", 1)[1]
    loop = "    while world_size == 3 and rank == 0:\n        pass  # busy forever\n"
    result = grade(EX, RING_STEP + "\n\ndef ring_exchange(k, v, rank, world_size):\n" + loop + exchange)
    assert not result and result.diagnosis == "exception" and result.checks_passed == 12, result.report()
    assert "rank(s) 0 still computing inside ring_exchange" in result.report()


def test_an_exchange_that_breaks_its_contract_is_said_so():
    """A rank whose exchange returns one tensor reports it at once: the others are stopped, nothing waits."""
    src = RING_STEP + "\n\ndef ring_exchange(k, v, rank, world_size):\n    return torch.cat([k, v], dim=-1)\n"
    result = grade(EX, src)
    assert not result and result.diagnosis == "contract", result.report()
    assert "ring_exchange must return (k_next, v_next), got Tensor" in result.report()


LOOPBACK_ONLY = '''

def ring_exchange(k, v, rank, world_size):
    """The reference's exchange, after checking that each socket this rank holds is bound to loopback."""
    import os
    import re

    mine = {m for fd in os.listdir("/proc/self/fd") for m in re.findall(r"socket:\\[(\\d+)\\]", _link(fd))}
    held = [row.split() for table in ("tcp", "tcp6") for row in open(f"/proc/self/net/{table}").read().splitlines()[1:]]
    held = [fields[1] for fields in held if fields[9] in mine]
    assert len(held) >= 2, held  # gloo's listener and a pair to each peer
    assert all(local.split(":")[0] in LOOPBACK for local in held), f"rank {rank} holds sockets on {held}"
    return reference_exchange(k, v, rank, world_size)


LOOPBACK = ("0100007F", "00000000000000000000000001000000")  # 127.0.0.1 and ::1 as /proc/net writes them


def _link(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
'''


def test_the_ranks_sockets_are_all_on_loopback():
    """While the ring runs, every TCP socket a rank holds (gloo's listener and its pairs) is bound to loopback."""
    src = REFERENCE.replace("def ring_exchange(", "def reference_exchange(") + "\nimport os\n" + LOOPBACK_ONLY
    result = grade(EX, src)
    assert result, result.report()
