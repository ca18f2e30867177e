"""What the sandboxed child says (its own errors, notes and refusals), as keys and arguments, and the texts those keys
stand for, in English and Chinese: data of the module that says them (here, and any sandbox module with a ``TEXTS`` of
its own, such as ``ranks``).

The harness sends both the English text and its "said" form, ``{"home": ..., "key": ..., "args": {...}}``: the module
whose ``TEXTS`` hold the key (named within this package), the key, and arguments that are strings or more said forms
(``list.semicolon`` / ``list.comma`` join a list of them). The grader, outside the sandbox, renders the said form in the
learner's language from the same data (``course_utils.grade.child``); the child itself only ever writes English, and
never imports the grader. Standard library only.
"""

from __future__ import annotations

import importlib
from typing import Any

PACKAGE = __name__.rpartition(".")[0]  # this package, as the child and the grader each import it

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
JOINS = {"list.semicolon": ("; ", "；"), "list.comma": (", ", "、")}


class Texts(dict):
    """A sandbox module's texts, key -> (English, Chinese), and its ``said`` forms of them."""

    def __init__(self, module: str, texts: dict[str, tuple[str, str]]):
        super().__init__(texts)
        self.home = module[len(PACKAGE) + 1 :]  # the module within this package: "texts", "ranks", "kinds.ring"

    def said(self, key: str, **args: Any) -> dict:
        """A text as plain data: the module that holds it, its key (or a join of JOINS, with ``items``) and its
        arguments."""
        if key not in self and key not in JOINS:
            raise KeyError(f"no text {key!r} in {self.home}")
        return {"home": self.home, "key": key, "args": args}


def table(home: str) -> dict:
    """The ``TEXTS`` of the module ``home`` of this package."""
    return importlib.import_module(f"{PACKAGE}.{home}").TEXTS


def english(tree) -> str:
    """The English of a said form."""
    if not isinstance(tree, dict):
        return str(tree)
    key, args = tree["key"], tree["args"]
    if key in JOINS:
        return JOINS[key][0].join(english(item) for item in args["items"])
    return table(tree["home"])[key][0].format(**{name: english(value) for name, value in args.items()})


TEXTS = Texts(
    __name__,
    {
        # loading the grader's parameters and calling the learner's module
        "not_module": ("the class must be an nn.Module, got {type}", "这个类必须是 nn.Module，你给的是 {type}"),
        "param_missing": (
            "the contract needs a parameter {name} ({layer} as an nn.Linear with a {kind}); your module has none",
            "接口约定需要参数 {name}（{layer} 应是带 {kind} 的 nn.Linear）；你的模块里没有",
        ),
        "param_shape": (
            "{name} has shape {got} but the contract needs {need}",
            "{name} 的形状应为 {need}，你的是 {got}",
        ),
        "param_extra": ("parameters the contract does not have: {names}", "接口约定里没有这些参数：{names}"),
        "param_extra_bias": (
            "parameters the contract does not have: {names} (is qkv_bias ignored?)",
            "接口约定里没有这些参数：{names}（是不是没理会 qkv_bias？）",
        ),
        "problems_more": ("{problems}; and {count} more", "{problems}；另外还有 {count} 处"),
        "forward_pair": (
            "forward must return (out, present), got {type}",
            "forward 必须返回 (out, present)，你返回的是 {type}",
        ),
        "present_pair": (
            "present must be None or a pair ({first} and {second}), got {type}",
            "present 必须是 None 或一对张量（{first} 和 {second}），你返回的是 {type}",
        ),
        "function_pair": ("{name} must return (out, lse), got {type}", "{name} 必须返回 (out, lse)，你返回的是 {type}"),
        "helper_missing": (
            "the contract also names a function {name}: define it beside {graded}",
            "接口约定里还有一个函数 {name}：请在 {graded} 旁边定义它",
        ),
        "the_function": ("the function", "这个函数"),
        "no_gradient": (
            "the output carries no gradient (requires_grad is False)",
            "输出不带梯度（requires_grad 为 False）",
        ),
        "timed_out": ("timed out (an infinite loop?)", "超时了（是不是有死循环？）"),
        "out_of_memory": ("ran out of memory (a huge allocation?)", "内存不够了（是不是分配了特别大的张量？）"),
        "at_line": ("line {line}: {src}", "第 {line} 行：{src}"),
        "at_line_bare": ("line {line}", "第 {line} 行"),
        # running the submission's cells, finding what to grade
        "cell_syntax": (
            "cell {cell}: SyntaxError: {message} (line {line})",
            "单元格 {cell}：SyntaxError：{message}（第 {line} 行）",
        ),
        "cell_exit": (
            "cell {cell}: called sys.exit(); the rest of the cell was skipped",
            "单元格 {cell}：调用了 sys.exit()，这个单元格剩下的代码被跳过了",
        ),
        "cell_error": ("cell {cell}: {type}: {message}", "单元格 {cell}：{type}：{message}"),
        "cell_error_line": ("cell {cell}: {type}: {message} ({line})", "单元格 {cell}：{type}：{message}（{line}）"),
        "no_class": ("no class {name} found", "没有找到类 {name}"),
        "no_class_found": (
            "no class {name} found; the classes defined are: {found}",
            "没有找到类 {name}；文件里定义的类有：{found}",
        ),
        "no_class_fits": (
            "no class {name}, and none of the classes defined ({found}) could be graded as multi-head attention on "
            'its own: name the one to grade, check("{exercise}", YourClass)',
            "没有类 {name}，定义的类（{found}）也没有哪一个能单独作为多头注意力来评分：请指明要评的类，"
            'check("{exercise}", 你的类)',
        ),
        "no_module": (
            "no nn.Module class found (interview mode grades any nn.Module subclass the file defines, {name} or "
            "another name)",
            "没有找到 nn.Module 类（面试模式会评文件里定义的任何 nn.Module 子类，叫 {name} 或别的名字都可以）",
        ),
        "no_function": ("no function {name} found", "没有找到函数 {name}"),
        "not_class": ("{name} is not a class", "{name} 不是类"),
        "not_function": ("{name} is not a function", "{name} 不是函数"),
        "stopped": ("grading {exercise} stopped: {message}", "{exercise} 的评分中途停止了：{message}"),
        # the learner site's course_utils (learner_site/course_utils/__init__.py)
        "course_numbers": (
            "course_utils.{name} is not available while a submission is graded: interview mode asks for its "
            "numbers, work them out yourself",
            "评分时不能调用 course_utils.{name}：面试模式问的就是它算出的数，请自己算",
        ),
        "course_withheld": (
            "course_utils.{name} is not available while a submission is graded: the exercise asks you to write it "
            "yourself (available: {available})",
            "评分时不能使用 course_utils.{name}：这道练习要你自己写出它（可以用的有：{available}）",
        ),
        # interview mode's dialects (dialects.py)
        "accepted": (
            ACCEPTED,
            "任何 nn.Module 类（文件里只有一个就评它；有好几个就评 check() 指定的那个，否则评能跑起来的那个）；"
            "构造函数按角色填写：参数名能看出角色的就按角色填（d_in/d_out 同书中写法；模型宽度如 d_model、"
            "embed_dim、n_embd；头数如 num_heads、n_head、h，或每个头的宽度如 head_dim；"
            "上下文长度如 context_length、block_size；dropout；bias；batch_first；或者一个 config 对象），"
            "其余参数逐一试填到能让模块各形状自洽的角色上；参数按角色和形状对应，名字不限：四个投影（nn.Linear，"
            "bias 可有可无，也可以是任一方向存放的裸矩阵）、按头拆开、可以拼回各头的小投影、"
            "形如 (heads, ...) 的按头张量，或者一个融合的 qkv 或 kv 矩阵（任意顺序和排布），嵌在多深的容器里都可以；"
            "在哪种对应方式下模块用评分器的权重算出的是多头注意力，就按哪种评分，"
            "评语会说明用的是哪种对应方式和构造参数映射；forward(x[, mask]) 或 forward(query, key, value[, mask])，"
            "返回 out 或 (out, weights)",
        ),
        "no_parameters": ("no parameters", "没有参数"),
        "dialect_constructor": (
            "cannot map the constructor ({names}): no argument's name says the model width or the number of heads, "
            "and no role the grader tried for them built a module it could grade; the smallest fix is a two-line "
            "adapter beside your class: {adapter}; interview mode accepts: {accepted}",
            "无法对应构造函数的参数（{names}）：没有哪个参数名看得出是模型宽度或头数，"
            "评分器试过的各种角色搭配也都没能构造出可以评分的模块；最小的改法是在你的类旁边加一个两行的适配器："
            "{adapter}。面试模式接受这些写法：{accepted}",
        ),
        "dialect_argument": (
            "the constructor needs {name}, which the grader can fill in neither by its name nor in any role it "
            "tried; the smallest fix is a two-line adapter beside your class: {adapter}; interview mode accepts: "
            "{accepted}",
            "构造函数需要参数 {name}，评分器既不能按它的名字填，试过的各种角色也都不合适；"
            "最小的改法是在你的类旁边加一个两行的适配器：{adapter}。面试模式接受这些写法：{accepted}",
        ),
        "dialect_forward": (
            "cannot call forward({names}): the grader passes x (or query, key, value) and a mask, and has nothing "
            "to give for {extra}; the smallest fix is a two-line adapter beside your class: {adapter}; interview "
            "mode accepts: {accepted}",
            "无法调用 forward({names})：评分器只传入 x（或 query、key、value）和掩码，没有东西可以传给 {extra}；"
            "最小的改法是在你的类旁边加一个两行的适配器：{adapter}。面试模式接受这些写法：{accepted}",
        ),
        "dialect_parameters": (
            "{problems}. Interview mode accepts: {accepted}",
            "{problems}。面试模式接受这些写法：{accepted}",
        ),
        "no_projection": ("no {roles}", "缺少{roles}"),
        "projection_q": ("query projection", "查询投影"),
        "projection_k": ("key projection", "键投影"),
        "projection_v": ("value projection", "值投影"),
        "projection_o": ("output projection", "输出投影"),
        "projection_qkv": ("fused qkv projection", "融合的 qkv 投影"),
        "cannot_place": ("parameters it cannot place: {names}", "无法对应的参数：{names}"),
        "dialect_shape": ("{name} has shape {got}, expected {need}", "{name} 的形状是 {got}，应为 {need}"),
    },
)
said = TEXTS.said


class Said(Exception):
    """An exception whose message is a said form (``.said``) of its class's ``texts``; ``str()`` is its English."""

    texts: Texts = TEXTS

    def __init__(self, key: str, **args):
        self.said = self.texts.said(key, **args)
        super().__init__(english(self.said))
