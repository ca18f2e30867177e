"""A ring of real processes for exercise 15: the learner's ``ring_step`` and ``ring_exchange`` run on
``world_size`` processes forked from this one (so the learner's functions are inherited, nothing is pickled),
joined by torch.distributed's gloo backend with a file rendezvous and gloo's sockets on the loopback interface:
nothing listens beyond 127.0.0.1 (in the sandbox, loopback is the only interface there is).

Each rank steps the ring (attend, then pass K/V to the next rank) and sends back what it computed and each chunk it
received; the grader, outside, compares. A ring that stops making progress is stopped after ``DEADLOCK_SECONDS``
and said to be deadlocked (its ranks blocked inside ``ring_exchange``) or stuck (inside ``ring_step``): a bounded
verdict, never a hang. Imports only torch and the standard library: it runs in the sandbox.
"""

from __future__ import annotations

import io
import mmap
import os
import select
import shutil
import socket
import struct
import tempfile
import time
from datetime import timedelta

import torch

from ..texts import Said, Texts, english

# what the ring says, key -> (English, Chinese)
TEXTS = Texts(
    __name__,
    {
        "ring_pair": ("{name} must return {what}, got {type}", "{name} 必须返回 {what}，你返回的是 {type}"),
        "ring_deadlock": (
            "the ring stopped making progress: rank(s) {ranks} still inside ring_exchange (ring step {step}) after "
            "{seconds} s, each waiting on a neighbour that waits too; the ranks were stopped",
            "环不再前进：{seconds} 秒后 rank {ranks} 仍停在 ring_exchange 里（环的第 {step} 步），"
            "每个 rank 都在等一个同样在等待的邻居；这些进程已被终止",
        ),
        "ring_stuck": (
            "rank(s) {ranks} still computing inside {function} after {seconds} s (an infinite loop?); the ranks "
            "were stopped",
            "{seconds} 秒后 rank {ranks} 仍在 {function} 里不停地计算（是不是有死循环？）；这些进程已被终止",
        ),
        "ring_join": (
            "the {count} processes of the ring could not join their process group: {why}",
            "环上的 {count} 个进程没能加入它们的进程组：{why}",
        ),
        "ring_rank_ended": (
            "rank {rank} ended without sending its result (os._exit, or a crash?)",
            "rank {rank} 没有发回结果就结束了（调用了 os._exit，还是崩溃了？）",
        ),
    },
)
said = TEXTS.said

JOIN_SECONDS = 10.0  # every rank joining the group (gloo's own timeout too: a blocked rank gives up after it)
DEADLOCK_SECONDS = 3.0  # from the last rank joining to every rank done: the ring's work takes milliseconds
DEADLOCK = "Deadlock"  # the error type of a ring stopped while its ranks were passing K/V
BUSY = 0.1  # a stalled rank that used more of a CPU than this is computing (a loop), not blocked in a transfer
JOINING, STEPPING, EXCHANGING, DONE = range(4)  # where a rank is, written by it into memory the parent reads
_SLOT = struct.Struct("ii")  # (phase, step) per rank


def _loopback() -> str:
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"


class RingContract(Said):
    """A learner's function returned something else than the pair the contract names."""

    texts = TEXTS


def _pair(value, name: str, what: str):
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise RingContract("ring_pair", name=name, what=what, type=type(value).__name__)
    return value


def _name(fn, default: str) -> str:
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else default


def _plain(t):
    return t.detach().to("cpu").as_subclass(torch.Tensor).clone() if isinstance(t, torch.Tensor) else None


# the process group's operations that are not a send to or a receive from one peer: collectives, and a receive
# from any source (a barrier only synchronises: allowed)
_COLLECTIVES = (
    "allgather",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "_allgather_base",
    "all_gather_single",
    "all_gather_single_coalesced",
    "allreduce",
    "allreduce_coalesced",
    "alltoall",
    "alltoall_base",
    "all_to_all_single",
    "broadcast",
    "gather",
    "scatter",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced",
    "_reduce_scatter_base",
    "recv_anysource",
)


def _watch_peers(rank: int, world_size: int) -> dict:
    """Record how this rank talks to the others, at the process group itself (every route of torch.distributed
    reaches it: dist.isend, P2POp, all_gather, a name bound before the fork): {"ring": False} once it used a
    collective, or sent to or received from a rank other than its two neighbours."""
    from torch.distributed.distributed_c10d import ProcessGroup

    seen = {"ring": True}
    neighbours = {(rank + 1) % world_size, (rank - 1) % world_size}

    def watched(name, original):
        def call(self, *args, **kwargs):
            if name in ("send", "recv"):
                peer = args[1] if len(args) > 1 else kwargs.get("dstRank", kwargs.get("srcRank"))
                if peer not in neighbours:
                    seen["ring"] = False
            else:
                seen["ring"] = False
            return original(self, *args, **kwargs)

        return call

    for name in ("send", "recv", *_COLLECTIVES):
        original = getattr(ProcessGroup, name, None)
        if original is not None:
            setattr(ProcessGroup, name, watched(name, original))
    return seen


def _rank(rank, world_size, store, call, step_fn, exchange_fn, phases, out_fd, hold_fd, describe, learner_files):
    """One rank, in a forked child: join, step the ring, write the payload, then wait for the parent to let go."""
    os.environ["GLOO_SOCKET_IFNAME"] = _loopback()
    torch.set_num_threads(1)  # W ranks on a machine of few cores; forked after OpenMP may have started in the parent
    q_chunks, k_chunks, v_chunks, seq_len, layout, causal = call["args"]
    payload = {"outputs": {}, "error": None}
    try:
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"file://{store}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=JOIN_SECONDS),
        )
    except Exception as exc:  # noqa: BLE001 - the environment's, not the learner's: said as such
        payload["join"] = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    else:
        try:
            peers = _watch_peers(rank, world_size)  # after the join: joining talks to every rank
            torch.manual_seed(call["seed"] + rank)
            q, k, v = q_chunks[rank].clone(), k_chunks[rank].clone(), v_chunks[rank].clone()
            out = torch.zeros_like(q)
            lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
            for step in range(world_size):
                source = (rank - step) % world_size  # the chunk a correct ring holds now
                _SLOT.pack_into(phases, rank * _SLOT.size, STEPPING, step)
                with torch.no_grad():
                    result = step_fn(q, k, v, out, lse, rank, source, world_size, seq_len, layout, causal)
                out, lse = _pair(result, _name(step_fn, "ring_step"), "(out, lse)")
                if step < world_size - 1:
                    _SLOT.pack_into(phases, rank * _SLOT.size, EXCHANGING, step)
                    received = exchange_fn(k, v, rank, world_size)
                    k, v = _pair(received, _name(exchange_fn, "ring_exchange"), "(k_next, v_next)")
                    payload["outputs"][f"rank{rank}.recv{step + 1}.k"] = _plain(k)
                    payload["outputs"][f"rank{rank}.recv{step + 1}.v"] = _plain(v)
            payload["outputs"][f"rank{rank}.out"] = _plain(out)
            payload["outputs"][f"rank{rank}.lse"] = _plain(lse)
            payload["outputs"][f"rank{rank}.p2p"] = torch.tensor(1.0 if peers["ring"] else 0.0)
        except BaseException as exc:  # noqa: BLE001 - any learner error becomes a message
            error = describe(exc, learner_files, "forward")
            payload = {"outputs": {}, "error": {**error, "contract": isinstance(exc, RingContract)}}
    _SLOT.pack_into(phases, rank * _SLOT.size, DONE, 0)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    with os.fdopen(out_fd, "wb") as out_file:
        out_file.write(buffer.getvalue())
    os.read(hold_fd, 1)  # alive (and joined) until the parent has every payload: no rank's exit breaks a peer
    os._exit(0)


def _error(key: str, **args) -> dict:
    """A record's error for what the parent saw of the ring (not an exception of the learner's)."""
    words = said(key, **args)
    return {
        "type": {"ring_deadlock": DEADLOCK, "ring_stuck": "Timeout"}.get(key, "RingError"),
        "message": english(words),
        "line": None,
        "where": "forward",
        "not_implemented": False,
        "contract": False,
        "said": words,
        "line_said": None,
        "step": 1,
    }


def _ranks_text(ranks) -> str:
    return ", ".join(str(r) for r in ranks)


def run_ring_case(step_fn, exchange_fn, case: dict, describe, learner_files=None) -> dict:
    """The record of one ring case: every rank's outputs, or the first error (a rank's, or the ring's)."""
    call = case["calls"][0]
    world_size = int(call["ranks"])
    record = {"case": case["name"], "error": None, "outputs": {}, "calls": []}
    store_dir = tempfile.mkdtemp(prefix="ring-")
    phases = mmap.mmap(-1, _SLOT.size * world_size)  # shared with the forked ranks
    hold_r, hold_w = os.pipe()
    children, buffers = {}, {}
    try:
        for rank in range(world_size):
            out_r, out_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the rank: never returns
                try:
                    os.close(out_r)
                    os.close(hold_w)
                    _rank(
                        rank,
                        world_size,
                        os.path.join(store_dir, "store"),
                        call,
                        step_fn,
                        exchange_fn,
                        phases,
                        out_w,
                        hold_r,
                        describe,
                        learner_files,
                    )
                finally:
                    os._exit(1)
            os.close(out_w)
            children[out_r] = (rank, pid)
            buffers[out_r] = b""
        record.update(_collect(children, buffers, phases, world_size))
    finally:
        os.close(hold_w)  # the ranks waiting on it go; those still blocked in the ring are killed
        for _, pid in children.values():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
        for fd in children:
            os.close(fd)
        os.close(hold_r)
        phases.close()
        shutil.rmtree(store_dir, ignore_errors=True)
    return record


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time a process has used (Linux's /proc), None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, ValueError, IndexError):
        return None


def _collect(children: dict, buffers: dict, phases, world_size: int) -> dict:
    """Read every rank's payload while watching the ring's progress; {"outputs": ...} or {"error": ...}."""
    start = time.monotonic()
    joined_at, cpu_at_join = None, {}
    payloads = {}
    open_fds = set(children)
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [], 0.02)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                buffers[fd] += chunk
                continue
            open_fds.discard(fd)
            rank, _ = children[fd]
            try:
                payload = torch.load(io.BytesIO(buffers[fd]), weights_only=True)
            except Exception:  # noqa: BLE001 - the rank died before its payload was whole
                payload = None
            if not isinstance(payload, dict) or not isinstance(payload.get("outputs", {}), dict):
                return {"error": _error("ring_rank_ended", rank=str(rank))}
            if payload.get("join"):
                return {"error": _error("ring_join", count=str(world_size), why=str(payload["join"]))}
            if payload.get("error") is not None:
                return {"error": {**payload["error"], "step": 1}}
            payloads[rank] = payload["outputs"]
        now = time.monotonic()
        states = [_SLOT.unpack_from(phases, r * _SLOT.size) for r in range(world_size)]
        if joined_at is None and all(phase != JOINING for phase, _ in states):
            joined_at = now
            cpu_at_join = {rank: _cpu_seconds(pid) for rank, pid in children.values()}
        if joined_at is None and now - start > JOIN_SECONDS + 1:
            return {"error": _error("ring_join", count=str(world_size), why=f"not joined after {JOIN_SECONDS:g} s")}
        if joined_at is not None and now - joined_at > DEADLOCK_SECONDS and open_fds:
            used = {rank: _cpu_seconds(pid) for rank, pid in children.values()}
            busy = {
                rank
                for rank, before in cpu_at_join.items()
                if before is not None
                and (after := used[rank]) is not None
                and after - before > BUSY * (now - joined_at)
            }
            return {"error": _stalled(states, busy)}
    outputs = {}
    for rank in sorted(payloads):
        outputs.update(payloads[rank])
    return {"outputs": outputs}


def _stalled(states, busy: set) -> dict:
    """The error of a ring stopped at the deadline: deadlocked (its ranks idle, blocked passing K/V) or stuck (a
    rank still computing: in ring_step, or busy inside ring_exchange)."""
    exchanging = [r for r, (phase, _) in enumerate(states) if phase == EXCHANGING]
    stepping = [r for r, (phase, _) in enumerate(states) if phase == STEPPING]
    seconds = f"{DEADLOCK_SECONDS:g}"
    if stepping:
        return _error("ring_stuck", ranks=_ranks_text(stepping), function="ring_step", seconds=seconds)
    if busy & set(exchanging):
        ranks = sorted(busy & set(exchanging))
        return _error("ring_stuck", ranks=_ranks_text(ranks), function="ring_exchange", seconds=seconds)
    steps = sorted({states[r][1] + 1 for r in exchanging})
    return _error("ring_deadlock", ranks=_ranks_text(exchanging), step=_ranks_text(steps), seconds=seconds)
