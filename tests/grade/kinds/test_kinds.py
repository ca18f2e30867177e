"""The kinds of exercise: each registered on both sides, the grader's (course_utils/grade/kinds/) and the child's
(course_utils/grade/sandbox/kinds/), under one name, and each kind's plan is what the child can read: plain data
that torch loads with weights_only (no object of the grader's goes into the sandbox)."""

import importlib
import io
import pkgutil
from dataclasses import replace

import pytest
import torch

from course_utils.grade import kinds
from course_utils.grade.exercises import EXERCISES
from course_utils.grade.protocol import Graded
from course_utils.grade.sandbox import kinds as child_kinds


def test_every_kind_has_both_sides_under_one_name():
    modules = [f"{child_kinds.__name__}.{info.name}" for info in pkgutil.iter_modules(child_kinds.__path__)]
    child = {name.rsplit(".", 1)[1] for name in modules if hasattr(importlib.import_module(name), "KIND")}
    assert set(kinds.KINDS) == child, "a kind is a module in grade/kinds/ and one of the same name in sandbox/kinds/"
    for name, kind in kinds.KINDS.items():
        assert kind.name == name == kind.child().name and kind.word == kind.child().word
    with pytest.raises(ValueError, match="unknown kind 'nope'; known: "):
        kinds.get("nope")


def test_every_exercise_declares_a_kind():
    assert {ex.kind for ex in EXERCISES.values()} <= set(kinds.KINDS)
    with pytest.raises(ValueError, match="unknown kind 'class'"):
        replace(EXERCISES["mha"], kind="class")  # the kinds' old names are no kinds


@pytest.mark.parametrize("exercise", sorted(EXERCISES))
def test_the_plan_is_plain_data_the_child_can_load(exercise):
    plan = Graded(exercise, seed=0).plan()
    assert plan["kind"] == EXERCISES[exercise].kind and plan["exercise"] == exercise
    buffer = io.BytesIO()
    torch.save(plan, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True).keys() == plan.keys()
