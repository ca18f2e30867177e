"""Exercise 11 (the capstone): ``find_induction_head(model) -> (layer, head)`` on trained GPTs whose heads the
grader moved; its cases, catalogue and verdict are ``specs_capstone``'s."""

from __future__ import annotations

from .. import specs_capstone
from ..registry import Exercise

EXERCISE = Exercise(
    id="induction_head",
    order=11,
    notebook="11_induction_head",
    points=3,
    kind="model",
    contract=specs_capstone.CONTRACT_FUNCTION["induction_head"],
    model=specs_capstone,
)
