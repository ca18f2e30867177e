"""Ring attention under ``torchrun``, unchanged from one machine to a cluster (NCCL on GPUs, gloo otherwise):

    torchrun --standalone --nproc-per-node=4 -m course_utils.reference.ring_torchrun --seq-len 4096

(on several nodes: torchrun's ``--nnodes``, ``--node-rank`` and ``--rdzv-endpoint`` instead of ``--standalone``).
Each process builds the same example from a seed, keeps its rank's chunks, runs ``ring_attention_rank`` and
compares its rows with SDPA over the whole sequence; it exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..lang import pick
from .ring_attention import LAYOUTS, example_qkv, ring_attention_rank, split_sequence


def main(argv=None):
    """Each process checks its rank's rows against SDPA on the whole sequence."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=1000)
    parser.add_argument("--layout", choices=LAYOUTS, default="zigzag")
    parser.add_argument("--no-causal", action="store_true")
    args = parser.parse_args(argv)
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=60))
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(device)
        q, k, v = (t.to(device) for t in example_qkv(args.seq_len))
        causal = not args.no_causal
        chunks = [split_sequence(t, world_size, args.layout)[rank] for t in (q, k, v)]
        out, _, sent = ring_attention_rank(*chunks, seq_len=args.seq_len, causal=causal, layout=args.layout)
        want = split_sequence(F.scaled_dot_product_attention(q, k, v, is_causal=causal), world_size, args.layout)[rank]
        err = (out - want).abs().max().item()
        print(
            pick(
                f"rank {rank}/{world_size} ({device}): max |ring - sdpa| = {err:.1e}, sent {sent} bytes",
                f"rank {rank}/{world_size}（{device}）：max |环 - sdpa| = {err:.1e}，发送了 {sent} 字节",
            )
        )
        ok = err < 1e-4
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
