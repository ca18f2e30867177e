"""Everything the grader tells a learner or an instructor, in English and in Chinese (中文): one catalogue.

``Msg(key, **args)`` is one such text. It is a ``str`` whose value is the English, so that printing it, comparing it
and searching it (``"shape" in why``) work as they always did; ``render(lang)`` gives the text in either language.
Arguments are numbers (formatted by the template, e.g. ``{diff:.3g}``), plain strings (identifiers, shapes, the
learner's own exception text: never translated), or other ``Msg``, rendered in the same language. Texts made of
several parts are keys of their own (``two_mistakes``, ``detail.case``, the ``list.*`` joins), never translated
strings glued together, so that Chinese can order the parts as Chinese does.

This module holds the texts every exercise shares; an exercise's own texts (its mistakes, its case titles) are in
its module's ``TEXTS``, which the registry adds here with ``add_texts`` when it finds the exercise. The sandboxed
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
    "question": ("question {id}", "问题 {id}"),
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
    "not_implemented.answer": ("not implemented yet: answer {question}", "还没有作答：{question}"),
    "not_implemented.answers": ("not implemented yet: answer {answers}", "还没有作答：{answers}"),
    # ---------------------------------------------------------------------------------------- comparing outputs
    "label.out": ("the output", "输出"),
    "label.keys": ("present keys", "present 中的键"),
    "label.values": ("present values", "present 中的值"),
    "label.grad_input": ("the gradient of the input", "输入的梯度"),
    "label.grad": ("the gradient of {param}", "{param} 的梯度"),
    "label.step": ("{step}: {what}", "第 {n} 次调用的{what}"),
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
    "refusal.imports": ("imports {what}", "导入了 {what}"),
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
    "delegation.function": ("{name} is course_utils' own ({module})", "{name} 是 course_utils 自带的实现（{module}）"),
    "delegation.class": (
        "{cls} is (or subclasses) course_utils' {base}",
        "{cls} 就是 course_utils 的 {base}（或它的子类）",
    ),
    "delegation.mha": ("{cls} subclasses nn.MultiheadAttention", "{cls} 继承了 nn.MultiheadAttention"),
    "delegation.forward": ("{cls}.forward comes from {module}", "{cls}.forward 来自 {module}"),
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
        "dropout applied to the output instead of the attention weights",
        "dropout 作用在了输出上，应当作用在注意力权重上",
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
    # ---------------------------------------------------------------------------------------- interview dialects
    "assumed": ("graded as the {name} dialect; mask convention: {mask}", "按照{name}的写法评分；掩码约定：{mask}"),
    "assumed.no_bias": (
        "graded as the {name} dialect; mask convention: {mask}; no bias on {roles}",
        "按照{name}的写法评分；掩码约定：{mask}；{roles} 没有 bias",
    ),
    "dialect.book": ("book", "书中"),
    "dialect.annotated": ("annotated transformer", "annotated transformer 教程"),
    "dialect.signature": ("{signature}", "构造参数为 {signature}"),
    "mask.built_in": ("built in", "内置（模块自己加因果掩码）"),
    "mask.keep": ("True = keep (mask == 0 hidden)", "True = 保留（mask == 0 处被遮住）"),
    "mask.hidden": ("True = hidden", "True = 遮住"),
    "mask.additive": ("additive (0 / -inf)", "加性掩码（0 / -inf）"),
    "mask.not_causal": ("{mask} (no convention made it causal)", "{mask}（没有哪种约定能让它满足因果性）"),
    # ---------------------------------------------------------------------------------------- interview follow-ups
    "q.llama2_7b": (
        "Llama-2-7B (32 layers, 32 heads, 32 KV heads, head_dim 128)",
        "Llama-2-7B（32 层，32 个头，32 个 KV 头，head_dim 128）",
    ),
    "q.kv_cache_bytes": (
        "bytes of the KV cache of {model} for one sequence of 4096 tokens in float16",
        "{model} 用 float16 处理一条 4096 个 token 的序列时，KV 缓存占多少字节",
    ),
    "q.kv_cache_bytes.only_k": (
        "that is only K (or only V): the cache holds both, a factor of 2",
        "这只是 K（或只是 V）：缓存里两个都要存，差了 2 倍",
    ),
    "q.kv_cache_bytes.float32": (
        "4 bytes per number is float32; the question says float16 (2 bytes)",
        "每个数 4 字节是 float32；题目说的是 float16（2 字节）",
    ),
    "q.kv_cache_bytes.one_layer": (
        "that is one layer's cache: multiply by the 32 layers",
        "这只是一层的缓存：还要乘以 32 层",
    ),
    "q.kv_cache_bytes.gib": (
        "2 GiB is right, but the question asks for bytes: 2 * 2**30",
        "2 GiB 是对的，但题目问的是字节数：2 * 2**30",
    ),
    "q.score_flops": (
        "FLOPs of the whole 4096 x 4096 score matrix Q·Kᵀ (masked entries too) in one layer of {model}, "
        "batch 1, prefill (a multiply-add counts as 2 FLOPs)",
        "{model} 的一层在预填充（prefill）4096 个 token、batch 为 1 时，算完整的 4096 x 4096 分数矩阵 Q·Kᵀ"
        "（被因果掩码遮住的位置也算）要多少 FLOPs（一次乘加算 2 个 FLOPs）",
    ),
    "q.score_flops.multiply_adds": (
        "that is half the answer: either multiply-adds (each is 2 FLOPs) or only the causal "
        "half of the matrix; the question counts FLOPs over the whole matrix, as a matmul "
        "computes it before the mask is applied",
        "这是答案的一半：要么算的是乘加次数（每次乘加是 2 个 FLOPs），要么只算了因果掩码留下的"
        "那一半；题目问的是整个矩阵的 FLOPs，矩阵乘法在加掩码之前就把它全算了",
    ),
    "q.score_flops.causal_multiply_adds": (
        "that is a quarter of the answer: multiply-adds (2 FLOPs each) over the "
        "causal half only; the question counts FLOPs over the whole matrix",
        "这是答案的四分之一：只数了因果掩码留下的那一半，而且数的是乘加次数（每次是 "
        "2 个 FLOPs）；题目问的是整个矩阵的 FLOPs",
    ),
    "q.score_flops.one_head": ("that is one head: there are 32", "这只是一个头：一共有 32 个"),
    "q.score_flops.d_model": (
        "the inner dimension of Q·Kᵀ per head is head_dim (128), not d_model; over 32 heads that "
        "is 4096 in total, so this is right only if you also dropped the heads",
        "每个头的 Q·Kᵀ 的内积维度是 head_dim（128），不是 d_model；32 个头加起来才是 4096，"
        "所以只有在你同时漏掉了头数时这个数才对",
    ),
    "q.grows_with_context": (
        "during decoding, what is kept from one step to the next and grows with the context "
        "length: 'queries', 'keys and values' or 'parameters' (the model's weight matrices)?",
        "解码时，哪一项要从一步保留到下一步、并且随上下文长度增长：'queries'、'keys and values' "
        "还是 'parameters'（模型的权重矩阵）？",
    ),
    "q.grows_with_context.queries": (
        "only the new token's query is needed at each step: that is why the cache holds no Q",
        "每一步只需要新 token 的查询：这正是缓存里不存 Q 的原因",
    ),
    "q.grows_with_context.weights": (
        "the parameters (the model's weight matrices) are fixed, whatever the context "
        "length; what grows is the cache of keys and values",
        "参数（模型的权重矩阵）是固定的，与上下文长度无关；随上下文增长的是键和值的缓存",
    ),
    "q.grows_with_context.attention_weights": (
        "the new token's attention weights do have one entry per cached token, "
        "but they are computed afresh at each step and not kept; what is kept, "
        "and grows, is the cache of keys and values",
        "新 token 的注意力权重确实每个缓存的 token 对应一项，但它们每一步都重新"
        "计算，不会保留下来；保留下来并不断增长的是键和值的缓存",
    ),
    "q.not_it": ("{value} is not it: {question}", "{value} 不对：{question}"),
    "q.not_a_number": ("expected a number, got {value}", "这里要填一个数，你给的是 {value}"),
    "q.ratio": (
        "{value:g} is {ratio:.3g} times the answer: recount the factors of {question}",
        "{value:g} 是正确答案的 {ratio:.3g} 倍：请重新数一数这道题里的各个因子：{question}",
    ),
    "q.line": ("{question}: {why}", "{question}：{why}"),
    # ---------------------------------------------------------------------------------------- reading submissions
    "source.at_line": ("{name} (line {line})", "{name}（第 {line} 行）"),
    "source.not_a_submission": (
        "{name}: only .py and .ipynb submissions are graded",
        "{name}：只评 .py 和 .ipynb 文件",
    ),
    "source.cannot_read": ("cannot read {name}: {error}", "无法读取 {name}：{error}"),
    "source.invalid_json": (
        "{name} is not a valid notebook (invalid JSON: {error})",
        "{name} 不是有效的笔记本（JSON 格式错误：{error}）",
    ),
    "source.no_cells": (
        "{name} is not a valid notebook (no list of cells)",
        "{name} 不是有效的笔记本（没有单元格列表）",
    ),
    "source.empty": ("the file is empty", "文件是空的"),
    "source.too_big": (
        "the file is larger than {limit} MiB, more than an exercise needs: not read",
        "文件超过 {limit} MiB，比任何练习需要的都大：没有读取",
    ),
    "source.too_much_code": (
        "the file holds {size} KiB of code, more than the grader reads ({limit} KiB)",
        "文件里有 {size} KiB 代码，超过评分器读取的上限（{limit} KiB）",
    ),
    "source.not_utf8": ("the file is not UTF-8 text (byte {position})", "文件不是 UTF-8 文本（第 {position} 个字节）"),
    "source.too_deep": ("nested too deeply", "嵌套太深"),
    "source.skipped_magic": ("skipped a %%{name} cell (not Python)", "跳过了一个 %%{name} 单元格（不是 Python 代码）"),
    # ---------------------------------------------------------------------------------------- running submissions
    "run.cell_note": ("cell {cell}: {note}", "单元格 {cell}：{note}"),
    "run.interview_detected": (
        "graded as {exercise} (interview mode): no check() call names an exercise, and the "
        "file's classes are no exercise's contract; pass --exercise to choose another",
        "按 {exercise}（面试模式）评分：没有 check() 调用指明练习，文件里的类也不符合任何练习的接口"
        "约定；要按别的练习评分，请加 --exercise",
    ),
    "run.no_exercise": (
        'no exercise found: no check("id", ...) call and no contract class name',
        '没有找到练习：既没有 check("id", ...) 调用，也没有接口约定里的类名',
    ),
    "run.timeout": (
        "grading stopped after {seconds:g} s (an infinite loop?)",
        "评分在 {seconds:g} 秒后被终止（是不是有死循环？）",
    ),
    "run.too_large": ("the submission's grading result was too large", "这份提交返回的评分结果太大了"),
    "run.ended": (
        "the submission ended the grading process (exit code {code}) before any result{memory}{tail}",
        "这份提交在给出任何结果之前就结束了评分进程（退出码 {code}）{memory}{tail}",
    ),
    "run.ended_memory": (", out of memory?", "，是不是内存不足？"),
    "run.ended_tail": (": {text}", "：{text}"),
    "run.unreadable": ("unreadable grading result ({type})", "评分结果无法读取（{type}）"),
    "run.malformed": ("malformed grading result: {why}", "评分结果的格式不对：{why}"),
    "run.not_graded": ("{exercise} was not graded", "{exercise} 没有被评分"),
    "run.missing_hint": ("{missing} ({note})", "{missing}（{note}）"),
    "run.over_memory": (
        "the submission used more than {limit} MiB of memory over all its processes (shared memory "
        "and temporary files included) and was stopped",
        "这份提交的所有进程（含共享内存和临时文件）一共用了超过 {limit} MiB 内存，被终止了",
    ),
    "run.over_processes": (
        "the submission started more than {limit} processes or threads and was stopped",
        "这份提交启动了超过 {limit} 个进程或线程，被终止了",
    ),
    "run.no_sandbox": ("graded without a sandbox ({why})", "没有沙箱，直接运行评分（{why}）"),
    "bad.records": ("wrong number of case records", "用例记录的数量不对"),
    "bad.record": ("a case record is not a mapping", "有一条用例记录不是字典"),
    "bad.outputs": ("outputs is not a mapping", "outputs 不是字典"),
    "bad.calls": ("calls is not a list of names", "calls 不是名字列表"),
    "bad.error": ("error is not a mapping", "error 不是字典"),
    "bad.error_field": ("error field {field} has the wrong type", "error 的字段 {field} 类型不对"),
    "bad.error_place": ("unknown error place", "未知的出错位置"),
    "bad.dialect": ("dialect is not a mapping", "dialect 不是字典"),
    "bad.dialect_fields": ("malformed dialect", "dialect 的格式不对"),
    "bad.exercises": ("not a mapping of exercises", "不是练习的字典"),
    "bad.model_records": ("wrong number of model records", "模型记录的数量不对"),
    "bad.model_record": ("a model record is not a mapping", "有一条模型记录不是字典"),
    "sandbox.not_linux": (
        "bubblewrap sandboxes need Linux (this is {platform})",
        "bubblewrap 沙箱只能在 Linux 上用（这台机器是 {platform}）",
    ),
    "sandbox.no_bwrap": (
        "bubblewrap (bwrap) is not installed: apt-get install bubblewrap",
        "没有安装 bubblewrap (bwrap)：apt-get install bubblewrap",
    ),
    "sandbox.no_namespaces": (
        "bwrap cannot create its namespaces here: {error}",
        "bwrap 无法在这里创建命名空间：{error}",
    ),
    # ---------------------------------------------------------------------------------------- batches and the CLI
    "batch.title": ("# Feedback for {name}", "# {name} 的评分反馈"),
    "batch.not_graded": ("**Not graded:** {error}", "**未评分：**{error}"),
    "batch.passed": (
        "## {exercise}: passed ({passed}/{total} checks, {points:g} of {max:g} points)",
        "## {exercise}：通过（{total} 项检查通过了 {passed} 项，得 {points:g} 分，满分 {max:g}）",
    ),
    "batch.not_passed": (
        "## {exercise}: not passed ({passed}/{total} checks, {points:g} of {max:g} points)",
        "## {exercise}：未通过（{total} 项检查通过了 {passed} 项，得 {points:g} 分，满分 {max:g}）",
    ),
    "batch.problems": ("## Problems while running your code", "## 运行你的代码时出现的问题"),
    "batch.status_passed": ("passed", "通过"),
    "batch.status": ("{exercise}: {diagnosis}", "{exercise}：{diagnosis}"),
    "batch.grader_failed": (
        "the grader failed on this submission ({type}: {error}); please report it",
        "评分器在这份提交上出错了（{type}：{error}）；请报告这个问题",
    ),
    "batch.link_broken": (
        "a link that leads nowhere (a loop, or a missing file)",
        "无效的链接（循环链接，或者目标不存在）",
    ),
    "status.not_implemented": ("not implemented yet", "还没有实现"),
    "status.missing": ("not found in the file", "文件里没有找到"),
    "status.missing_after_error": (
        "not found: a cell failed before it (see the feedback)",
        "没有找到：在它之前有单元格出错（见反馈）",
    ),
    "status.exception": ("raised an error", "运行出错"),
    "status.contract": ("breaks the contract", "不符合接口约定"),
    "status.wrong_shape": ("wrong output shape", "输出形状不对"),
    "status.wrong_values": ("wrong values", "输出数值不对"),
    "status.wrong_answer": ("wrong answer", "答案不对"),
    "status.timeout": ("stopped: too slow", "超时，被终止"),
    "status.crashed": ("the run crashed", "运行崩溃"),
    "status.unreadable": ("the file cannot be read", "文件无法读取"),
    "status.grader_error": ("the grader failed", "评分器出错"),
    "status.forbidden": ("no credit: uses a built-in attention", "不得分：用了内置的注意力实现"),
    "status.delegates": ("no credit: uses the course's reference code", "不得分：用了课程的参考实现"),
    "status.other": ("not passed", "未通过"),
    "cli.graded": (
        "graded {count} submissions in {seconds:.0f} s: {passed} passed everything, {failed} did not, "
        "{errors} could not be graded, {skipped} skipped; {out}",
        "{seconds:.0f} 秒评完了 {count} 份提交：{passed} 份全部通过，{failed} 份没有全部通过，{errors} 份无法评分，"
        "跳过 {skipped} 个文件；{out}",
    ),
    "batch.progress_line": (
        "[{done}/{count}] {name}: {status} ({seconds:.1f} s)",
        "[{done}/{count}] {name}：{status}（{seconds:.1f} 秒）",
    ),
    "batch.progress_bar": (
        "{bar} {done}/{count}, about {left:.0f} s left",
        "{bar} {done}/{count}，大约还要 {left:.0f} 秒",
    ),
    "batch.link_outside": ("a link to a file outside the submissions folder", "指向提交文件夹之外的链接"),
    "batch.not_a_file": ("not a file", "不是文件"),
    "batch.not_a_submission": ("not a submission (.py or .ipynb)", "不是提交文件（.py 或 .ipynb）"),
    "batch.no_folder": ("submissions folder {folder} does not exist", "提交文件夹 {folder} 不存在"),
    "batch.out_inside": (
        "the output folder must not be inside the submissions folder (submissions are read-only)",
        "输出文件夹不能放在提交文件夹里面（提交的文件只读）",
    ),
    "cli.refuse_batch": (
        "error: refusing to grade a folder of submissions without a sandbox: {why}.\nSubmissions are "
        "code from other people; install bubblewrap, or pass --trust-submissions if you trust every "
        "file.",
        "错误：没有沙箱，拒绝评一整个文件夹的提交：{why}。\n提交的是别人写的代码；请安装 bubblewrap，"
        "如果你信任每一个文件，也可以加上 --trust-submissions。",
    ),
    "cli.skipped": ("skipped {name}: {why}", "跳过了 {name}：{why}"),
    "cli.skipped_line": ("{name}: {why}", "{name}：{why}"),
    "cli.grader_failed_on": ("error: the grader failed on {names}", "错误：评分器在这些提交上出错了：{names}"),
    "cli.need_path": ("give a PATH to grade, or --batch DIR", "请给出要评分的 PATH，或者用 --batch DIR"),
    "cli.grader_failed": ("error: the grader failed: {type}: {error}", "错误：评分器出错了：{type}：{error}"),
    "cli.not_graded": ("❌ not graded: {error}", "❌ 未评分：{error}"),
    "cli.note": ("   note: {note}", "   注：{note}"),
    # ---------------------------------------------------------------------------------------- issue 29 (h2-fair)
    # interview mode: the constructor mapping and the parameters' placement the grader used, after "assumed"
    "assumed.placed": (
        "{assumed}; constructor: {mapping}; parameters: {placement}",
        "{assumed}；构造参数：{mapping}；参数位置：{placement}",
    ),
    # a notebook whose code and text, outputs dropped, is still more than the grader reads
    "source.too_big_without_outputs": (
        "the notebook is larger than {limit} MiB without its outputs, more than an exercise needs: not read",
        "去掉输出后笔记本仍大于 {limit} MiB，超出练习所需：未读取",
    ),
    # ---------------------------------------------------------------------------------------- end of issue 29
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
