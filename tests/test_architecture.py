"""The import layers of course_utils (ARCHITECTURE.md): no cycle, and every import points down the layers, with
the documented exceptions only. Read from the source (ast), so that imports inside functions count too."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import course_utils

ROOT = Path(course_utils.__file__).resolve().parent
LEARNER_SITE = ROOT / "grade" / "sandbox" / "learner_site"  # a package of its own, mounted in the sandbox

# bottom first; a module belongs to the layer of its longest matching prefix
LAYERS = [
    [
        "course_utils.lang",
        "course_utils.data",
        "course_utils.device",
        "course_utils.memory",
        "course_utils.viz",
        "course_utils.viz_zh",
        "course_utils.figure_check",
    ],  # the toolbox
    ["course_utils.reference"],  # the answers
    ["course_utils.capstone"],  # the course's GPT
    ["course_utils.grade.__init__"],  # the grader's face: lazy re-exports, it imports nothing when loaded
    ["course_utils.grade.sandbox"],  # what the sandbox mounts
    [
        "course_utils.grade.messages",
        "course_utils.grade.child",
        "course_utils.grade.spacing",
        "course_utils.grade.escape",
        "course_utils.grade.names",
    ],  # texts, escaping
    ["course_utils.grade.types", "course_utils.grade.records"],  # shared types, what comes back from a run
    ["course_utils.grade.diagnose"],  # the verdict's parts, the same for every kind
    ["course_utils.grade.kinds"],  # the ways of calling learner code, one module each
    [
        "course_utils.grade.registry",
        "course_utils.grade.kit",
        "course_utils.grade.heads",
        "course_utils.grade.jail",
        "course_utils.grade.limits",
    ],  # computations, process control
    ["course_utils.grade.exercises"],  # one declaration each
    [
        "course_utils.grade.protocol",
        "course_utils.grade.questions",
        "course_utils.grade.source",
        "course_utils.grade.points",
    ],  # cases, plan and verdict by exercise id; reading; points
    [
        "course_utils.grade.runner",
        "course_utils.grade.history",
        "course_utils.grade.class_report",
    ],  # one submission; a learner's own record; the class report
    [
        "course_utils.grade.batch",
        "course_utils.grade.progress",
        "course_utils.grade.notebook",
        "course_utils.grade.__main__",
    ],  # entry points
    ["course_utils.__init__"],  # the re-exports
]
# the harness runs in the sandbox, where course_utils is the learner site's: the course's GPT where an exercise of the
# model kind is graded alone (imported inside the function that needs it). Its import of the learner site's check()
# (that only records) reaches course_utils.grade's face, which sits below the sandbox: no exception needed.
EXCEPTIONS = {
    ("course_utils.grade.sandbox.kinds.model", "course_utils.gpt"),
}


def module_name(path: Path) -> str:
    return ".".join(("course_utils",) + path.relative_to(ROOT).with_suffix("").parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py") if LEARNER_SITE not in p.parents}


def imports(name: str, path: Path, known: set) -> set:
    """The course_utils modules that ``name`` imports, anywhere in its source."""
    package = name.rsplit(".", 1)[0] if not name.endswith("__init__") else name.rsplit(".", 1)[0]
    if name.endswith(".__init__"):
        package = name[: -len(".__init__")]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            bases = [a.name for a in node.names]
            names = [None] * len(bases)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            bases, names = [base] * len(node.names), [a.name for a in node.names]
        else:
            continue
        for base, attr in zip(bases, names, strict=True):
            if not base.startswith("course_utils"):
                continue
            for target in (f"{base}.{attr}" if attr else None, base, f"{base}.__init__"):
                if target in known:  # a submodule imported by name, else the module itself, else a package
                    found.add(target)
                    break
            else:
                found.add(base)  # not a file here (course_utils.gpt, an alias): kept for the exceptions
            found |= packages_run(base, known)
    found.discard(name)
    return found


def packages_run(module: str, known: set) -> set:
    """The package ``__init__``s Python runs before ``module`` (``from . import x`` runs the package's first),
    but the root's: every module of course_utils runs it, and its own imports are checked like any module's."""
    parts = module.split(".")
    inits = {".".join(parts[:i]) + ".__init__" for i in range(2, len(parts) + 1)}
    return inits & known


def layer(name: str) -> int:
    best = max(
        ((len(p), i) for i, prefixes in enumerate(LAYERS) for p in prefixes if name == p or name.startswith(p + ".")),
        default=None,
    )
    assert best is not None, f"{name} is in no layer: add it to ARCHITECTURE.md and LAYERS"
    return best[1]


def graph() -> dict[str, set]:
    found = modules()
    known = set(found)
    return {name: imports(name, path, known) for name, path in found.items()}


def test_every_module_has_a_layer():
    for name in modules():
        layer(name)


def test_imports_point_down_the_layers():
    upward = [
        (a, b) for a, targets in graph().items() for b in targets if (a, b) not in EXCEPTIONS and layer(b) > layer(a)
    ]
    assert not upward, "imports that point up the layers (see ARCHITECTURE.md): " + ", ".join(
        f"{a} -> {b}" for a, b in upward
    )


def test_no_import_cycle():
    edges = {a: {b for b in targets if b in targets and (a, b) not in EXCEPTIONS} for a, targets in graph().items()}
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path):
    # the checks above would pass on anything if imports() found nothing: it must see both kinds of import
    g = graph()
    assert "course_utils.grade.exercises.__init__" in g["course_utils.grade.protocol"]
    assert "course_utils.reference.multihead" in g["course_utils.capstone.gpt"]
    assert layer("course_utils.grade.exercises.mha") > layer("course_utils.grade.kit")
    # ``from .. import kit`` in an exercise runs the grader's package first, as Python does
    assert "course_utils.grade.__init__" in g["course_utils.grade.exercises.mha"]


# the grader's modules that every kind of exercise goes through: they name no exercise and nothing a kind keeps to
# itself (its calls' fields, its cases' fields, its name); an exercise's and a kind's own are asked of them
GENERIC = [
    "grade/types.py",
    "grade/protocol.py",
    "grade/diagnose.py",
    "grade/records.py",
    "grade/runner.py",
    "grade/notebook.py",
    "grade/messages.py",
    "grade/child.py",
    "grade/jail.py",
    "grade/source.py",
    "grade/points.py",
    "grade/batch.py",
    "grade/sandbox/running.py",
    "grade/sandbox/harness.py",
]


def kind_private_names() -> set:
    """The fields of every kind's calls and cases beyond what every case has, and the kinds' names but the two a
    contract names ("function" and "module" are also plain words)."""
    from dataclasses import fields

    from course_utils.grade import kinds
    from course_utils.grade.types import Case

    shared = {f.name for f in fields(Case)} | {"seed", "args", "x", "state", "kwargs", "kind"}  # words too plain
    names = set()
    for kind in kinds.KINDS.values():
        module = importlib.import_module(type(kind).__module__)
        for name in ("Call", "Case"):
            if hasattr(module, name):
                names |= {f.name for f in fields(getattr(module, name))}
        names |= {p.fget.__name__ for p in vars(getattr(module, "Call", object)).values() if isinstance(p, property)}
    return (names - shared) | {"ring_size", "fn_args"} | set(kinds.KINDS) - {"function", "module"}


def named_in(path: Path) -> set:
    """The string constants, attribute names and keyword names of a module's source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
    return found


def test_the_generic_grader_names_no_exercise_and_nothing_a_kind_keeps_to_itself():
    from course_utils.grade.exercises import IDS

    forbidden = set(IDS) | kind_private_names()
    assert {"ring_size", "tile_bound", "given_past", "model", "induction_head"} <= forbidden  # the check can fail
    for module in GENERIC:
        named = named_in(ROOT / module) & forbidden
        assert not named, f"{module} names {sorted(named)}: ask the exercise or its kind (kinds/) instead"
