"""The book's running example: six tokens with 3-dimensional embeddings."""

from __future__ import annotations

import torch

BOOK_TOKENS = ["Your", "journey", "starts", "with", "one", "step"]


def book_inputs() -> torch.Tensor:
    """(6, 3) embeddings of "Your journey starts with one step" (LLMs-from-scratch ch03)."""
    return torch.tensor(
        [
            [0.43, 0.15, 0.89],  # Your     (x^1)
            [0.55, 0.87, 0.66],  # journey  (x^2)
            [0.57, 0.85, 0.64],  # starts   (x^3)
            [0.22, 0.58, 0.33],  # with     (x^4)
            [0.77, 0.25, 0.10],  # one      (x^5)
            [0.05, 0.80, 0.55],  # step     (x^6)
        ]
    )


def book_batch() -> torch.Tensor:
    """(2, 6, 3): the book's batch, the same six tokens twice."""
    inputs = book_inputs()
    return torch.stack((inputs, inputs), dim=0)
