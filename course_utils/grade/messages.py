"""Everything the grader tells a learner or an instructor, in English and in Chinese (中文): one catalogue.

``Msg(key, **args)`` is one such text. It is a ``str`` whose value is the English, so that printing it, comparing it
and searching it (``"shape" in why``) work as they always did; ``render(lang)`` gives the text in either language.
Arguments are numbers (formatted by the template, e.g. ``{diff:.3g}``), plain strings (identifiers, shapes, the
learner's own exception text: never translated), or other ``Msg``, rendered in the same language. Texts made of
several parts are keys of their own (``two_mistakes``, ``detail.case``, the ``list.*`` joins), never translated
strings glued together, so that Chinese can order the parts as Chinese does.

This module holds the texts several modules share. A text of one module is in that module's ``TEXTS``, added here
with ``add_texts``: an exercise's (its mistakes, its case titles) when the registry finds the exercise, the others'
(the CLI's, the batch's, the protocol's, the follow-up questions'...) when that module is imported. The sandboxed
child does not import this module: it says its few texts as keys and arguments (``sandbox/texts.py``), and
``child.from_child`` turns what it sent into a ``Msg``. Languages: ``course_utils.lang``.
"""

from __future__ import annotations

from ..lang import current_language, normalize_language
from .sandbox import texts as child
from .spacing import fill_zh

# key -> (English template, Chinese template)
CATALOGUE: dict[str, tuple[str, str]] = {
    # ---------------------------------------------------------------------------------------- a result
    "result.passed": ("✅ {exercise}: all {total} checks passed", "✅ {exercise}：{total} 项检查全部通过"),
    "result.failed": (
        "❌ {exercise}: {passed}/{total} checks passed: {first}",
        "❌ {exercise}：{total} 项检查通过了 {passed} 项：{first}",
    ),
    "result.no_reason": ("failed", "未通过"),
    "result.assumed": ("({assumed})", "（{assumed}）"),
    "assumed.output_dropout": (
        "{assumed}; the dropout after the output projection (as nanoGPT's resid_dropout) was left out of the "
        "training-mode check: it is a legitimate place for one, and the check is about the dropout on the attention "
        "weights",
        "{assumed}；输出投影之后的 dropout（如 nanoGPT 的 resid_dropout）没有计入训练模式的检查：那里放 dropout "
        "是合理的，这项检查看的是注意力权重上的 dropout",
    ),
    "assumed.output_dropout_alone": (
        "the dropout after the output projection (as nanoGPT's resid_dropout) was left out of the training-mode "
        "check: it is a legitimate place for one, and the check is about the dropout on the attention weights",
        "输出投影之后的 dropout（如 nanoGPT 的 resid_dropout）没有计入训练模式的检查：那里放 dropout 是合理的，"
        "这项检查看的是注意力权重上的 dropout",
    ),
    # ---------------------------------------------------------------------------------------- not implemented
    "not_implemented.write": (
        "not implemented yet: write {name} (it raises NotImplementedError)",
        "还没有实现：请写出 {name}（它现在会抛出 NotImplementedError）",
    ),
    "not_implemented.write_all": (
        "not implemented yet: write {names} (they raise NotImplementedError)",
        "还没有实现：请写出 {names}（它们现在会抛出 NotImplementedError）",
    ),
    "not_implemented.define_class": ("not implemented yet: define class {name}", "还没有实现：请定义类 {name}"),
    "not_implemented.define_module": (
        "not implemented yet: define your attention class (an nn.Module, named {name} or anything else)",
        "还没有实现：请定义你的注意力类（一个 nn.Module，叫 {name} 或别的名字都可以）",
    ),
    "not_implemented.define_function": ("not implemented yet: define function {name}", "还没有实现：请定义函数 {name}"),
    # ---------------------------------------------------------------------------------------- comparing outputs
    "label.out": ("the output", "输出"),
    "label.keys": ("present keys", "present 中的键"),
    "label.values": ("present values", "present 中的值"),
    "label.grad_input": ("the gradient of the input", "输入的梯度"),
    "label.grad": ("the gradient of {param}", "{param} 的梯度"),
    "label.step": ("{step}: {what}", "第 {n} 次调用的{what}"),
    "label.rank": ("{what} of rank {rank}", "rank {rank} 的{what}"),
    "label.received": (
        "{what} rank {rank} received before ring step {step}",
        "rank {rank} 在第 {step} 步之前收到的{what}",
    ),
    "label.received_k": ("the keys", "键"),
    "label.received_v": ("the values", "值"),
    "compare.not_none": ("{label} must be None when use_cache=False", "use_cache=False 时{label}必须是 None"),
    "compare.missing": ("{label} is missing", "缺少{label}"),
    "compare.none": ("{label} is None, expected a tensor of shape {shape}", "{label}是 None，应为形状 {shape} 的张量"),
    "compare.not_tensor": (
        "{label} is {got}, expected a tensor of shape {shape}",
        "{label}是 {got}，应为形状 {shape} 的张量",
    ),
    "compare.shape": (
        "{label} has shape {got} but the contract needs {need}{extra}",
        "{label}形状为 {got}，但接口约定要求 {need}{extra}",
    ),
    "compare.cache_layout": (
        " ([b, num_heads, n_past + n_new, head_dim])",
        "（[b, num_heads, n_past + n_new, head_dim]）",
    ),
    "compare.not_tiled": (
        "{step}: not tiled: more memory than tiles need (the full score matrix, or a (block, n_k) "
        "row strip of it, was built); compute the scores one (block_size, block_size) tile at a time",
        "{step}：没有分块：用的内存超出了分块所需（构造了完整的分数矩阵，或其中一整条 (block, n_k) 的"
        "行带）；应当一次只算一个 (block_size, block_size) 的分数分块",
    ),
    "compare.not_absorbed": (
        "{step}: absorb=True built per-head keys or values of every cached token",
        "{step}：absorb=True 时为每个缓存的 token 构造了每个头的键或值",
    ),
    "compare.not_p2p": (
        "{step}: ring_exchange went through a collective (or a rank other than its two neighbours): a ring passes "
        "each chunk to rank + 1 with point-to-point sends and receives",
        "{step}：ring_exchange 用了集合通信（或与两个邻居之外的 rank 通信）：环是用点对点的发送和接收把每个块传给 "
        "rank + 1",
    ),
    "compare.nan": ("{label} contains NaN", "{label}中出现了 NaN"),
    "compare.differs": (
        "{label} differs from the reference (max abs difference {diff:.3g})",
        "{label}与参考实现不一致（最大绝对误差 {diff:.3g}）",
    ),
    "compare.differs_up_to": (
        "{label} differs from the reference (max abs difference up to {diff:.3g})",
        "{label}与参考实现不一致（最大绝对误差最高 {diff:.3g}）",
    ),
    "compare.nonfinite": (
        "{label} is {got} where the reference is {need} (at {count} of its {total} numbers, the "
        "first at index {index})",
        "{label}在参考实现为 {need} 的位置上是 {got}（{total} 个数里有 {count} 个这样，第一个在下标 {index}）",
    ),
    # ---------------------------------------------------------------------------------------- errors, refusals
    "where.construct": ("constructing the module", "构造模块时"),
    "where.load": ("loading the grader's parameters", "载入评分器的参数时"),
    "where.forward": ("forward", "forward 中"),
    "where.backward": ("the backward pass", "反向传播时"),
    "error.contract": ("contract: {message}", "接口约定：{message}"),
    "error.in": ("{type} in {where}: {message}", "{where}出现 {type}：{message}"),
    "error.in_line": ("{type} in {where}: {message} (your {line})", "{where}出现 {type}：{message}（你的代码{line}）"),
    "error.plain": ("{type}: {message}", "{type}：{message}"),
    "error.plain_line": ("{type}: {message} (your {line})", "{type}：{message}（你的代码{line}）"),
    "refusal.calls_course": ("calls course_utils' reference code ({call})", "调用了 course_utils 的参考实现（{call}）"),
    "refusal.interview_call": (
        "runs {call}, fused attention, which interview mode does not allow",
        "运行了 {call}（融合注意力），面试模式不允许这样做",
    ),
    "refusal.flex": (
        "runs FlexAttention ({call}), fused attention, which interview mode does not allow",
        "运行了 FlexAttention（{call}），这是融合注意力，面试模式不允许这样做",
    ),
    "refusal.profiler_stopped": (
        "stops the grader's record of the operators it runs (the profiler), so what it computes cannot be checked",
        "关掉了评分器记录所运行算子的 profiler，无法确认它算的是什么",
    ),
    "refusal.imports_cell": ("imports cell {cell}: {what}", "单元格 {cell} 导入了 {what}"),
    "refusal.course_scoring": ("calls {call}, the course's own scoring", "调用了课程自带的打分函数 {call}"),
    "refused.forbidden": (
        "no credit: interview mode (手撕MHA) asks for the computation by hand, without "
        "F.scaled_dot_product_attention, FlexAttention, nn.MultiheadAttention or course_utils: "
        "{first}",
        "不得分：面试模式（手撕MHA）要求亲手写出计算过程，不能用 F.scaled_dot_product_attention、"
        "FlexAttention、nn.MultiheadAttention 或 course_utils：{first}",
    ),
    "refused.delegates": (
        "no credit: the submission delegates to course_utils' reference implementation: {first}",
        "不得分：提交的代码直接用了 course_utils 的参考实现：{first}",
    ),
    "refused.capstone": (
        "no credit: compute the head scores yourself: {first}",
        "不得分：各个头的分数要你自己算：{first}",
    ),
    # ---------------------------------------------------------------------------------------- the verdict
    "detail.every_case": ("every case: {why}", "所有用例：{why}"),
    "detail.case": ("case '{case}': {why}", "用例「{case}」：{why}"),
    "detail.cases": ("{count} of {total} cases: {why}", "{total} 个用例中的 {count} 个：{why}"),
    "wrong_shape": ("wrong output shape: {why}", "输出形状不对：{why}"),
    "wrong_values": (
        "outputs differ from the reference, and match no known mistake; compare your steps with the notebook's",
        "输出与参考实现不一致，也对不上任何已知的常见错误；请对照笔记本逐步检查你的计算",
    ),
    "two_mistakes": ("two mistakes: {first}; and {second}", "两处错误：{first}；另外，{second}"),
    "dropout_wrong_scale": (
        "{base}; the kept weights are scaled by {ratio:.3g}, as for dropout p={p_seen:.2g}, but "
        "the constructor's dropout is {p:g}",
        "{base}；保留下来的权重被放大了 {ratio:.3g} 倍，相当于 dropout p={p_seen:.2g}，但构造函数给的 dropout 是 {p:g}",
    ),
    # ---------------------------------------------------------------------------------------- the verdict's mistakes
    "mutant.grad_leaves_autograd": (
        "forward fails when gradients are on: the computation leaves autograd (.numpy() "
        "on a tensor that requires grad); use torch operations throughout",
        "开启梯度时 forward 会出错：计算离开了 autograd（对需要梯度的张量调用了 .numpy()）；请全程使用 torch 运算",
    ),
    "mutant.dropout_ignored": (
        "dropout has no effect in training mode: apply self.dropout(p) to the attention weights",
        "训练模式下 dropout 没有起作用：要对注意力权重应用 self.dropout(p)",
    ),
    "mutant.dropout_on_scores": (
        "dropout applied to the scores before the softmax: it must act on the attention "
        "weights after the softmax (dropped weights are 0, the others scaled by 1/(1-p))",
        "dropout 作用在了 softmax 之前的分数上：它应当作用在 softmax 之后的注意力权重上"
        "（被丢弃的权重为 0，其余的乘以 1/(1-p)）",
    ),
    "mutant.dropout_on_output": (
        "dropout applied to the output instead of the attention weights (a dropout after the output projection "
        "may come in addition, not instead)",
        "dropout 作用在了输出上，应当作用在注意力权重上（输出投影之后可以再加一个 dropout，但不能代替它）",
    ),
    "mutant.dropout_on_values": (
        "dropout applied to the values: every query then loses the same keys; dropout acts on the attention "
        "weights, one random mask per weight (dropped weights are 0, the others scaled by 1/(1-p))",
        "dropout 作用在了值上：这样每个查询丢掉的都是同样的键；dropout 应当作用在注意力权重上，每个权重各自随机"
        "（被丢弃的权重为 0，其余的乘以 1/(1-p)）",
    ),
    "mutant.dropout_wrong": (
        "in training mode the output is not attention with dropout on the weights: each weight "
        "must be either 0 or weight/(1-p), with dropout p",
        "训练模式下的输出不是“对注意力权重做 dropout”的结果：每个权重要么是 0，要么是 "
        "weight/(1-p)（p 是 dropout 概率）",
    ),
    "mutant.dropout_in_eval": (
        "dropout active in eval mode: outputs change from call to call after .eval(); use "
        "self.dropout = nn.Dropout(p) (or dropout_p=p if self.training else 0.0)",
        "eval 模式下 dropout 仍在起作用：调用 .eval() 之后每次调用的输出都不一样；请用 "
        "self.dropout = nn.Dropout(p)（或 dropout_p=p if self.training else 0.0）",
    ),
}

# the sandboxed child's own texts: their English is in sandbox/texts.py, their Chinese here
CHILD_ZH = {
    "course_numbers": "评分时不能调用 course_utils.{name}：面试模式问的就是它算出的数，请自己算",
    "course_withheld": "评分时不能使用 course_utils.{name}：这道练习要你自己写出它（可以用的有：{available}）",
    "not_module": "这个类必须是 nn.Module，你给的是 {type}",
    "param_missing": "接口约定需要参数 {name}（{layer} 应是带 {kind} 的 nn.Linear）；你的模块里没有",
    "param_shape": "{name} 的形状应为 {need}，你的是 {got}",
    "param_extra": "接口约定里没有这些参数：{names}",
    "param_extra_bias": "接口约定里没有这些参数：{names}（是不是没理会 qkv_bias？）",
    "problems_more": "{problems}；另外还有 {count} 处",
    "forward_pair": "forward 必须返回 (out, present)，你返回的是 {type}",
    "present_pair": "present 必须是 None 或一对张量（{first} 和 {second}），你返回的是 {type}",
    "function_pair": "{name} 必须返回 (out, lse)，你返回的是 {type}",
    "helper_missing": "接口约定里还有一个函数 {name}：请在 {graded} 旁边定义它",
    "the_function": "这个函数",
    "no_gradient": "输出不带梯度（requires_grad 为 False）",
    "timed_out": "超时了（是不是有死循环？）",
    "out_of_memory": "内存不够了（是不是分配了特别大的张量？）",
    "at_line": "第 {line} 行：{src}",
    "at_line_bare": "第 {line} 行",
    "cell_syntax": "单元格 {cell}：SyntaxError：{message}（第 {line} 行）",
    "cell_exit": "单元格 {cell}：调用了 sys.exit()，这个单元格剩下的代码被跳过了",
    "cell_error": "单元格 {cell}：{type}：{message}",
    "cell_error_line": "单元格 {cell}：{type}：{message}（{line}）",
    "no_class": "没有找到类 {name}",
    "no_class_found": "没有找到类 {name}；文件里定义的类有：{found}",
    "no_class_fits": (
        "没有类 {name}，定义的类（{found}）也没有哪一个能单独作为多头注意力来评分：请指明要评的类，"
        'check("{exercise}", 你的类)'
    ),
    "no_module": "没有找到 nn.Module 类（面试模式会评文件里定义的任何 nn.Module 子类，叫 {name} 或别的名字都可以）",
    "no_function": "没有找到函数 {name}",
    "not_class": "{name} 不是类",
    "not_function": "{name} 不是函数",
    "stopped": "{exercise} 的评分中途停止了：{message}",
    "ring_pair": "{name} 必须返回 {what}，你返回的是 {type}",
    "ring_deadlock": (
        "环不再前进：{seconds} 秒后 rank {ranks} 仍停在 ring_exchange 里（环的第 {step} 步），"
        "每个 rank 都在等一个同样在等待的邻居；这些进程已被终止"
    ),
    "ring_stuck": "{seconds} 秒后 rank {ranks} 仍在 {function} 里不停地计算（是不是有死循环？）；这些进程已被终止",
    "ring_join": "环上的 {count} 个进程没能加入它们的进程组：{why}",
    "ring_rank_ended": "rank {rank} 没有发回结果就结束了（调用了 os._exit，还是崩溃了？）",
    "accepted": (
        "任何 nn.Module 类（文件里只有一个就评它；有好几个就评 check() 指定的那个，否则评能跑起来的那个）；"
        "构造函数按角色填写：参数名能看出角色的就按角色填（d_in/d_out 同书中写法；模型宽度如 d_model、embed_dim、"
        "n_embd；头数如 num_heads、n_head、h，或每个头的宽度如 head_dim；上下文长度如 context_length、block_size；"
        "dropout；bias；batch_first；或者一个 config 对象），其余参数逐一试填到能让模块各形状自洽的角色上；"
        "参数按角色和形状对应，名字不限：四个投影（nn.Linear，bias 可有可无，也可以是任一方向存放的裸矩阵）、"
        "按头拆开、可以拼回各头的小投影、形如 (heads, ...) 的按头张量，或者一个融合的 qkv 或 kv 矩阵"
        "（任意顺序和排布），嵌在多深的容器里都可以；在哪种对应方式下模块用评分器的权重算出的是多头注意力，"
        "就按哪种评分，评语会说明用的是哪种对应方式和构造参数映射；forward(x[, mask]) 或 "
        "forward(query, key, value[, mask])，返回 out 或 (out, weights)"
    ),
    "no_parameters": "没有参数",
    "dialect_constructor": (
        "无法对应构造函数的参数（{names}）：没有哪个参数名看得出是模型宽度或头数，评分器试过的各种角色搭配也都"
        "没能构造出可以评分的模块；最小的改法是在你的类旁边加一个两行的适配器：{adapter}。"
        "面试模式接受这些写法：{accepted}"
    ),
    "dialect_argument": (
        "构造函数需要参数 {name}，评分器既不能按它的名字填，试过的各种角色也都不合适；最小的改法是在你的类"
        "旁边加一个两行的适配器：{adapter}。面试模式接受这些写法：{accepted}"
    ),
    "dialect_forward": (
        "无法调用 forward({names})：评分器只传入 x（或 query、key、value）和掩码，没有东西可以传给 "
        "{extra}；最小的改法是在你的类旁边加一个两行的适配器：{adapter}。面试模式接受这些写法：{accepted}"
    ),
    "dialect_parameters": "{problems}。面试模式接受这些写法：{accepted}",
    "no_projection": "缺少{roles}",
    "projection_q": "查询投影",
    "projection_k": "键投影",
    "projection_v": "值投影",
    "projection_o": "输出投影",
    "projection_qkv": "融合的 qkv 投影",
    "cannot_place": "无法对应的参数：{names}",
    "dialect_shape": "{name} 的形状是 {got}，应为 {need}",
}
CATALOGUE.update({key: (en, CHILD_ZH.get(key, "")) for key, en in child.TEXTS.items()})
JOINS = {key: (en, {"list.semicolon": "；", "list.comma": "、"}[key]) for key, en in child.JOINS.items()}
# texts that are only a frame around their parts (placeholders, code, punctuation): Chinese by its punctuation
FRAMES = {
    "result.assumed",
    "compare.cache_layout",
    "error.plain",
    "q.line",
    "run.ended_tail",
    "run.missing_hint",
    "batch.status",
    "cli.skipped_line",
}
CATALOGUE.update(JOINS)


def resolve(lang: str | None = None) -> str:
    """'en' or 'zh': ``lang`` normalized, or the course's current language when None."""
    return normalize_language(lang) if lang else current_language()


class Msg(str):
    """A catalogue text: ``str(msg)`` is the English, ``msg.render("zh")`` the Chinese."""

    key: str
    args: dict

    def __new__(cls, key: str, /, **args):
        if key not in CATALOGUE:
            raise KeyError(f"no text {key!r} in the grader's catalogue")
        self = super().__new__(cls, _render(key, args, "en"))
        self.key, self.args = key, args
        return self

    def render(self, lang: str | None = None) -> str:
        lang = resolve(lang)
        return str.__str__(self) if lang == "en" else _render(self.key, self.args, lang)

    def __reduce__(self):  # pickling and deep copies (dataclasses.asdict) keep the key and arguments
        return (_rebuild, (self.key, self.args))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _rebuild(key, args):
    return Msg(key, **args)


def text(value, lang: str | None = None):
    """``value`` in ``lang``: a Msg rendered, anything else as it is (a plain string has no translation)."""
    return value.render(lang) if isinstance(value, Msg) else value


def joined(items, sep: str = ";") -> Msg:
    """The items as one text, joined by '; ' (sep=';') or ', ' (sep=',') in English, and by '；' or '、' in Chinese."""
    return Msg("list.semicolon" if sep == ";" else "list.comma", items=list(items))


def case_title(name: str):
    """A case's name as a text of the catalogue (a name it lacks stays as it is)."""
    return Msg("case:" + name) if "case:" + name in CATALOGUE else name


def add_texts(texts: dict[str, tuple[str, str]]) -> None:
    """Add an exercise's (or the kit's) texts, key -> (English, Chinese), to the catalogue. A case title
    (``case:<English>``) is shown as it is written: its braces are not placeholders. A key already there with other
    words is an error: two exercises cannot say one mistake differently under one key."""
    for key, (en, zh) in texts.items():
        if key.startswith("case:"):
            en = en.replace("{", "{{").replace("}", "}}")
        if CATALOGUE.get(key, (en, zh)) != (en, zh):
            raise ValueError(f"text {key!r} declared twice with different words")
        CATALOGUE[key] = (en, zh)


def _value(v, lang):
    return v.render(lang) if isinstance(v, Msg) else v


def _render(key, args, lang) -> str:
    if key in JOINS:
        return JOINS[key][lang == "zh"].join(str(_value(item, lang)) for item in args["items"])
    en, zh = CATALOGUE[key]
    values = {name: _value(v, lang) for name, v in args.items()}
    if lang != "zh" or not zh:
        return en.format(**values)
    if key == "label.step":  # "step3" -> 第 3 次调用的...
        values["n"] = values["step"][4:] if values["step"].startswith("step") else values["step"]
    return fill_zh(zh, values)
