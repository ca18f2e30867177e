"""What the sandboxed child says (its own errors, notes and refusals), in English, as keys and arguments.

The harness sends both the English text and its "said" form, ``{"key": ..., "args": {...}}``, whose arguments are
strings or more said forms (``list.semicolon`` / ``list.comma`` join a list of them). The grader, outside the
sandbox, renders the said form in the learner's language from its catalogue (``course_utils.grade.messages``,
which holds the Chinese for these keys); the child never sees that catalogue. Standard library only.
"""

from __future__ import annotations

# what interview mode grades (dialects.py): quoted whenever a class cannot be mapped. Parameters are placed by role
# and shape, constructor arguments filled by role: names only decide which placement and mapping are tried first
ACCEPTED = (
    "any nn.Module class (one in the file: that one; several: the one check() names, else the one that "
    "runs); its constructor filled in by role: an argument whose name says its role (d_in/d_out as in the book; a "
    "width such as d_model, embed_dim or n_embd; heads such as num_heads, n_head or h, or a head width such as "
    "head_dim; a context length such as context_length or block_size; dropout; bias; batch_first; or one config "
    "object) gets it, any other argument is tried in the roles that make the module's shapes consistent; its "
    "parameters placed by role and shape, whatever their names: four projections (nn.Linear, bias optional, or bare "
    "matrices stored either way round), per-head pieces stacked into heads, per-head (heads, ...) tensors, or a "
    "fused qkv or kv matrix split in any order and layout, at any depth of containers; the placement under which "
    "the module computes multi-head attention with the grader's weights is the one graded, and the verdict says "
    "which, with the constructor mapping; forward(x[, mask]) or forward(query, key, value[, mask]), returning out "
    "or (out, weights)"
)

TEXTS = {
    # loading the grader's parameters and calling the learner's module (harness.py)
    "not_module": "the class must be an nn.Module, got {type}",
    "param_missing": "the contract needs a parameter {name} ({layer} as an nn.Linear with a {kind}); your module "
    "has none",
    "param_shape": "{name} has shape {got} but the contract needs {need}",
    "param_extra": "parameters the contract does not have: {names}",
    "param_extra_bias": "parameters the contract does not have: {names} (is qkv_bias ignored?)",
    "problems_more": "{problems}; and {count} more",
    "forward_pair": "forward must return (out, present), got {type}",
    "present_pair": "present must be None or a pair ({first} and {second}), got {type}",
    "function_pair": "{name} must return (out, lse), got {type}",
    "helper_missing": "the contract also names a function {name}: define it beside {graded}",
    "the_function": "the function",
    "no_gradient": "the output carries no gradient (requires_grad is False)",
    "timed_out": "timed out (an infinite loop?)",
    "out_of_memory": "ran out of memory (a huge allocation?)",
    "at_line": "line {line}: {src}",
    "at_line_bare": "line {line}",
    # running the submission's cells, finding what to grade
    "cell_syntax": "cell {cell}: SyntaxError: {message} (line {line})",
    "cell_exit": "cell {cell}: called sys.exit(); the rest of the cell was skipped",
    "cell_error": "cell {cell}: {type}: {message}",
    "cell_error_line": "cell {cell}: {type}: {message} ({line})",
    "no_class": "no class {name} found",
    "no_class_found": "no class {name} found; the classes defined are: {found}",
    "no_class_fits": "no class {name}, and none of the classes defined ({found}) could be graded as multi-head "
    'attention on its own: name the one to grade, check("{exercise}", YourClass)',
    "no_module": "no nn.Module class found (interview mode grades any nn.Module subclass the file defines, "
    "{name} or another name)",
    "no_function": "no function {name} found",
    "not_class": "{name} is not a class",
    "not_function": "{name} is not a function",
    "stopped": "grading {exercise} stopped: {message}",
    # a ring of real processes (ranks.py, exercise 15)
    "ring_pair": "{name} must return {what}, got {type}",
    "ring_deadlock": "the ring stopped making progress: rank(s) {ranks} still inside ring_exchange (ring step "
    "{step}) after {seconds} s, each waiting on a neighbour that waits too; the ranks were stopped",
    "ring_stuck": "rank(s) {ranks} still computing inside {function} after {seconds} s (an infinite loop?); the "
    "ranks were stopped",
    "ring_join": "the {count} processes of the ring could not join their process group: {why}",
    "ring_rank_ended": "rank {rank} ended without sending its result (os._exit, or a crash?)",
    # the learner site's course_utils (learner_site/course_utils/__init__.py)
    "course_numbers": "course_utils.{name} is not available while a submission is graded: interview mode asks for "
    "its numbers, work them out yourself",
    "course_withheld": "course_utils.{name} is not available while a submission is graded: the exercise asks you "
    "to write it yourself (available: {available})",
    # interview mode's dialects (dialects.py)
    "accepted": ACCEPTED,
    "no_parameters": "no parameters",
    "dialect_constructor": "cannot map the constructor ({names}): no argument's name says the model width or the "
    "number of heads, and no role the grader tried for them built a module it could grade; the smallest fix is a "
    "two-line adapter beside your class: {adapter}; interview mode accepts: {accepted}",
    "dialect_argument": "the constructor needs {name}, which the grader can fill in neither by its name nor in any "
    "role it tried; the smallest fix is a two-line adapter beside your class: {adapter}; interview mode accepts: "
    "{accepted}",
    "dialect_forward": "cannot call forward({names}): the grader passes x (or query, key, value) and a mask, and "
    "has nothing to give for {extra}; the smallest fix is a two-line adapter beside your class: "
    "{adapter}; interview mode accepts: {accepted}",
    "dialect_parameters": "{problems}. Interview mode accepts: {accepted}",
    "no_projection": "no {roles}",
    "projection_q": "query projection",
    "projection_k": "key projection",
    "projection_v": "value projection",
    "projection_o": "output projection",
    "projection_qkv": "fused qkv projection",
    "cannot_place": "parameters it cannot place: {names}",
    "dialect_shape": "{name} has shape {got}, expected {need}",
}
JOINS = {"list.semicolon": "; ", "list.comma": ", "}


def said(key: str, **args) -> dict:
    """A text as plain data: a key of TEXTS (or JOINS, with ``items``) and its arguments."""
    return {"key": key, "args": args}


def english(tree) -> str:
    """The English of a said form."""
    if not isinstance(tree, dict):
        return str(tree)
    key, args = tree["key"], tree["args"]
    if key in JOINS:
        return JOINS[key].join(english(item) for item in args["items"])
    return TEXTS[key].format(**{name: english(value) for name, value in args.items()})


class Said(Exception):
    """An exception whose message is a said form (``.said``); ``str()`` is its English."""

    def __init__(self, key: str, **args):
        self.said = said(key, **args)
        super().__init__(english(self.said))
