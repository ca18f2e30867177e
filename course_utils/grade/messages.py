"""Everything the grader tells a learner or an instructor, in English and in Chinese (中文): one catalogue.

``Msg(key, **args)`` is one such text. It is a ``str`` whose value is the English, so that printing it, comparing it
and searching it (``"shape" in why``) work as they always did; ``render(lang)`` gives the text in either language.
Arguments are numbers (formatted by the template, e.g. ``{diff:.3g}``), plain strings (identifiers, shapes, the
learner's own exception text: never translated), or other ``Msg``, rendered in the same language. Texts made of
several parts are keys of their own (``two_mistakes``, ``detail.case``, the ``list.*`` joins), never translated
strings glued together, so that Chinese can order the parts as Chinese does.

The sandboxed child does not import this module: it says its few texts as keys and arguments
(``sandbox/texts.py``), and ``from_child`` turns what it sent into a ``Msg`` here. Languages: ``course_utils.lang``.
"""
from __future__ import annotations

import string

from ..lang import current_language, normalize_language
from .sandbox import texts as child

# key -> (English template, Chinese template)
CATALOGUE: dict[str, tuple[str, str]] = {
    # ---------------------------------------------------------------------------------------- a result
    "result.passed": ("✅ {exercise}: all {total} checks passed", "✅ {exercise}：{total} 项检查全部通过"),
    "result.failed": ("❌ {exercise}: {passed}/{total} checks passed: {first}",
                      "❌ {exercise}：{total} 项检查通过了 {passed} 项：{first}"),
    "result.no_reason": ("failed", "未通过"),
    "result.assumed": ("({assumed})", "（{assumed}）"),
    "question": ("question {id}", "问题 {id}"),

    # ---------------------------------------------------------------------------------------- not implemented
    "not_implemented.write": ("not implemented yet: write {name} (it raises NotImplementedError)",
                              "还没有实现：请写出 {name}（它现在会抛出 NotImplementedError）"),
    "not_implemented.define_class": ("not implemented yet: define class {name}", "还没有实现：请定义类 {name}"),
    "not_implemented.define_function": ("not implemented yet: define function {name}",
                                        "还没有实现：请定义函数 {name}"),
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
    "compare.not_tensor": ("{label} is {got}, expected a tensor of shape {shape}",
                           "{label}是 {got}，应为形状 {shape} 的张量"),
    "compare.shape": ("{label} has shape {got} but the contract needs {need}{extra}",
                      "{label}形状为 {got}，但接口约定要求 {need}{extra}"),
    "compare.cache_layout": (" ([b, num_heads, n_past + n_new, head_dim])",
                             "（[b, num_heads, n_past + n_new, head_dim]）"),
    "compare.not_tiled": ("{step}: not tiled: more memory than tiles need (the full score matrix, or a (block, n_k) "
                          "row strip of it, was built); compute the scores one (block_size, block_size) tile at a time",
                          "{step}：没有分块：用的内存超出了分块所需（构造了完整的分数矩阵，或其中一整条 (block, n_k) 的"
                          "行带）；应当一次只算一个 (block_size, block_size) 的分数分块"),
    "compare.not_absorbed": ("{step}: absorb=True built per-head keys or values of every cached token",
                             "{step}：absorb=True 时为每个缓存的 token 构造了每个头的键或值"),
    "compare.nan": ("{label} contains NaN", "{label}中出现了 NaN"),
    "compare.differs": ("{label} differs from the reference (max abs difference {diff:.3g})",
                        "{label}与参考实现不一致（最大绝对误差 {diff:.3g}）"),
    "compare.differs_up_to": ("{label} differs from the reference (max abs difference up to {diff:.3g})",
                              "{label}与参考实现不一致（最大绝对误差最高 {diff:.3g}）"),
    "compare.nonfinite": ("{label} is {got} where the reference is {need} (at {count} of its {total} numbers, the "
                          "first at index {index})",
                          "{label}在参考实现为 {need} 的位置上是 {got}（{total} 个数里有 {count} 个这样，第一个在下标 "
                          "{index}）"),

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
    "refusal.interview_call": ("runs {call}, fused attention, which interview mode does not allow",
                               "运行了 {call}（融合注意力），面试模式不允许这样做"),
    "refusal.flex": ("runs FlexAttention ({call}), fused attention, which interview mode does not allow",
                     "运行了 FlexAttention（{call}），这是融合注意力，面试模式不允许这样做"),
    "refusal.profiler_stopped": ("stops the grader's record of the operators it runs (the profiler), so what it "
                                 "computes cannot be checked",
                                 "关掉了评分器记录所运行算子的 profiler，无法确认它算的是什么"),
    "refusal.imports": ("imports {what}", "导入了 {what}"),
    "refusal.imports_cell": ("imports cell {cell}: {what}", "单元格 {cell} 导入了 {what}"),
    "refusal.course_scoring": ("calls {call}, the course's own scoring", "调用了课程自带的打分函数 {call}"),
    "refused.forbidden": ("no credit: interview mode (手撕MHA) asks for the computation by hand, without "
                          "F.scaled_dot_product_attention, FlexAttention, nn.MultiheadAttention or course_utils: "
                          "{first}",
                          "不得分：面试模式（手撕MHA）要求亲手写出计算过程，不能用 F.scaled_dot_product_attention、"
                          "FlexAttention、nn.MultiheadAttention 或 course_utils：{first}"),
    "refused.delegates": ("no credit: the submission delegates to course_utils' reference implementation: {first}",
                          "不得分：提交的代码直接用了 course_utils 的参考实现：{first}"),
    "refused.capstone": ("no credit: compute the head scores yourself: {first}", "不得分：各个头的分数要你自己算：{first}"),
    "delegation.function": ("{name} is course_utils' own ({module})", "{name} 是 course_utils 自带的实现（{module}）"),
    "delegation.class": ("{cls} is (or subclasses) course_utils' {base}",
                         "{cls} 就是 course_utils 的 {base}（或它的子类）"),
    "delegation.mha": ("{cls} subclasses nn.MultiheadAttention", "{cls} 继承了 nn.MultiheadAttention"),
    "delegation.forward": ("{cls}.forward comes from {module}", "{cls}.forward 来自 {module}"),

    # ---------------------------------------------------------------------------------------- the verdict
    "detail.every_case": ("every case: {why}", "所有用例：{why}"),
    "detail.case": ("case '{case}': {why}", "用例「{case}」：{why}"),
    "detail.cases": ("{count} of {total} cases: {why}", "{total} 个用例中的 {count} 个：{why}"),
    "wrong_shape": ("wrong output shape: {why}", "输出形状不对：{why}"),
    "wrong_values": ("outputs differ from the reference, and match no known mistake; compare your steps with the "
                     "notebook's",
                     "输出与参考实现不一致，也对不上任何已知的常见错误；请对照笔记本逐步检查你的计算"),
    "two_mistakes": ("two mistakes: {first}; and {second}", "两处错误：{first}；另外，{second}"),
    "dropout_wrong_scale": ("{base}; the kept weights are scaled by {ratio:.3g}, as for dropout p={p_seen:.2g}, but "
                            "the constructor's dropout is {p:g}",
                            "{base}；保留下来的权重被放大了 {ratio:.3g} 倍，相当于 dropout p={p_seen:.2g}，"
                            "但构造函数给的 dropout 是 {p:g}"),

    # ---------------------------------------------------------------------------------------- mistakes (specs)
    "mutant.no_scale": ("scores are not scaled: divide Q·Kᵀ by √head_dim before the softmax",
                        "注意力分数没有缩放：softmax 之前要把 Q·Kᵀ 除以 √head_dim"),
    "mutant.scale_no_sqrt": ("scores divided by head_dim instead of √head_dim",
                             "注意力分数除以了 head_dim，应当除以 √head_dim"),
    "mutant.scale_d_out": ("scores scaled by √d_out (d_model) instead of √head_dim (head_dim = d_out // num_heads)",
                           "注意力分数除以了 √d_out（d_model），应当除以 √head_dim（head_dim = d_out // num_heads）"),
    "mutant.scale_d_in": ("scores scaled by √d_in instead of √head_dim (the keys' width, d_out // num_heads)",
                          "注意力分数除以了 √d_in，应当除以 √head_dim（键向量的宽度，d_out // num_heads）"),
    "mutant.softmax_wrong_axis": ("softmax over the wrong axis (dim=-2, the queries): each query's weights must sum "
                                  "to 1 over the keys, softmax(dim=-1)",
                                  "softmax 的维度不对（dim=-2，沿查询归一化了）：每个查询的注意力权重应当在所有键上"
                                  "加起来等于 1，即 softmax(dim=-1)"),
    "mutant.softmax_heads_axis": ("softmax over the heads axis (dim=1): each query's weights must sum to 1 over the "
                                  "keys, softmax(dim=-1)",
                                  "softmax 做在了头的维度上（dim=1）：每个查询的注意力权重应当在所有键上加起来等于 1，"
                                  "即 softmax(dim=-1)"),
    "mutant.softmax_batch_axis": ("softmax over a fixed dim=0: on notebook 01's 1-D scores of one query that is the "
                                  "keys, but here the scores are (batch, ..., queries, keys) and dim=0 is the batch; "
                                  "softmax(dim=-1) is the keys whatever the rank",
                                  "softmax 固定做在了 dim=0 上：在笔记本 01 里只有一个查询的一维分数上，dim=0 就是键；"
                                  "但这里的分数是 (batch, ..., queries, keys)，dim=0 是 batch 维；softmax(dim=-1) "
                                  "不管几维都是键"),
    "mutant.softmax_fixed_dim1": ("softmax over a fixed dim=1: on unbatched (queries, keys) scores that is the keys, "
                                  "but on batched (batch, queries, keys) scores it is the queries; softmax(dim=-1) "
                                  "is the keys with or without a batch",
                                  "softmax 固定做在了 dim=1 上：没有 batch 维的 (queries, keys) 分数上它是键，但有 "
                                  "batch 维的 (batch, queries, keys) 分数上它是查询；softmax(dim=-1) 有没有 batch "
                                  "维都是键"),
    "mutant.mask_inverted": ("causal mask inverted: tokens see the future but not the past (True = hide and "
                             "True = allow mixed up, e.g. masked_fill(mask == 0, ...) on a triu mask)",
                             "因果掩码反了：token 能看到未来，却看不到过去（把“True = 遮住”和“True = 允许”弄混了，"
                             "例如对 triu 掩码用了 masked_fill(mask == 0, ...)）"),
    "mutant.mask_zero_fill": ("masked scores filled with 0 instead of -inf: softmax still gives the hidden (future) "
                              "keys weight exp(0)",
                              "被遮住的分数填成了 0 而不是 -inf：softmax 仍会给被遮住的（未来的）键 exp(0) 的权重"),
    "mutant.mask_after_softmax": ("mask applied after the softmax: the remaining weights no longer sum to 1; fill the "
                                  "scores with -inf before the softmax",
                                  "掩码加在了 softmax 之后：剩下的权重加起来不再等于 1；应当在 softmax 之前把分数填成 -inf"),
    "mutant.diagonal_masked": ("diagonal masked too (triu with diagonal=0): a token must attend to itself; use "
                               "torch.triu(..., diagonal=1)",
                               "对角线也被遮住了（triu 用了 diagonal=0）：token 必须能关注它自己；请用 "
                               "torch.triu(..., diagonal=1)"),
    "mutant.no_causal_mask": ("no causal mask: tokens attend to later tokens", "没有因果掩码：token 关注到了它后面的 token"),
    "mutant.mask_not_sliced": ("mask not sliced to the sequence length: it fails for inputs shorter than "
                               "context_length; use self.mask[:num_tokens, :num_tokens]",
                               "掩码没有按序列长度切片：输入比 context_length 短时就会出错；请用 "
                               "self.mask[:num_tokens, :num_tokens]"),
    "mutant.keys_from_query": ("keys computed with the query weights: use self.W_key(x)",
                               "键是用查询的权重算出来的：应当用 self.W_key(x)"),
    "mutant.values_from_key": ("values computed with the key weights: use self.W_value(x)",
                               "值是用键的权重算出来的：应当用 self.W_value(x)"),
    "mutant.split_no_transpose": ("heads split without transposing: view(b, num_heads, T, head_dim) mixes tokens into "
                                  "heads; use view(b, T, num_heads, head_dim).transpose(1, 2)",
                                  "拆分多头时没有转置：view(b, num_heads, T, head_dim) 会把不同 token 的特征混进同一个头；"
                                  "请用 view(b, T, num_heads, head_dim).transpose(1, 2)"),
    "mutant.merge_no_transpose": ("heads merged without transposing back: transpose(1, 2) the (b, num_heads, T, "
                                  "head_dim) context to (b, T, num_heads, head_dim) before .view(b, T, d_out)",
                                  "合并多头前忘了把维度转置回来：先用 transpose(1, 2) 把形状为 (b, num_heads, T, "
                                  "head_dim) 的上下文向量变成 (b, T, num_heads, head_dim)，再 .view(b, T, d_out)"),
    "mutant.merge_input_width": ("heads merged into the input's width: view(B, S, D) with D = x.shape[-1] (d_in) "
                                 "only works when d_in == d_out; merge into d_out: .view(B, S, d_out) or "
                                 ".reshape(B, S, -1)",
                                 "合并多头时用了输入的宽度：view(B, S, D) 里的 D = x.shape[-1] 是 d_in，只有 d_in == "
                                 "d_out 时才对；应当合并成 d_out：.view(B, S, d_out) 或 .reshape(B, S, -1)"),
    "mutant.no_out_proj": ("missing output projection: apply self.out_proj to the merged heads",
                           "缺少输出投影：合并多头之后还要经过 self.out_proj"),
    "mutant.causal_in_self_attention": ("a causal mask is applied, but SelfAttention_v2 is not causal: every token "
                                        "attends to every token",
                                        "加了因果掩码，但 SelfAttention_v2 不是因果的：每个 token 都要关注所有 token"),
    "mutant.wrapper_shared_weights": ("every head uses the first head's weights: call each head in self.heads",
                                      "每个头都用了第一个头的权重：应当分别调用 self.heads 中的每个头"),
    "mutant.wrapper_summed": ("heads summed instead of concatenated: torch.cat([head(x) for head in self.heads], "
                              "dim=-1)",
                              "多个头的输出被加在了一起，应当拼接：torch.cat([head(x) for head in self.heads], dim=-1)"),
    "mutant.wrapper_cat_wrong_axis": ("heads concatenated along the tokens (dim=1) instead of the features (dim=-1)",
                                      "多个头沿 token 维（dim=1）拼接了，应当沿特征维（dim=-1）拼接"),
    "mutant.kv_tiled": ("K/V groups tiled (repeat, or head h reads group h % num_kv_groups) instead of interleaved: "
                        "query head h reads group h // (num_heads // num_kv_groups), use "
                        "repeat_interleave(group_size, dim=1)",
                        "K/V 分组用了平铺（tile：repeat，或让头 h 读第 h % num_kv_groups 组）而不是交错（interleave）："
                        "查询头 h 应当读第 h // (num_heads // num_kv_groups) 组，请用 repeat_interleave(group_size, dim=1)"),
    "mutant.kv_one_group": ("every query head reads K/V group 0: expand/repeat each of the num_kv_groups groups for "
                            "its num_heads // num_kv_groups query heads",
                            "每个查询头读的都是第 0 组 K/V：应当把 num_kv_groups 组中的每一组扩展（expand/repeat）给"
                            "它对应的 num_heads // num_kv_groups 个查询头"),
    "mutant.mask_top_left": ("causal mask aligned to the start of the cache (or is_causal=True on a chunk): the new "
                             "queries are the LAST positions; hide key j from new query i when j > n_past + i, e.g. "
                             "mask[n_past:n_past + n_new, :n_past + n_new]",
                             "因果掩码对齐到了缓存的开头（或对一段输入用了 is_causal=True）：新的查询在序列的最后几个位置；"
                             "当 j > n_past + i 时，要对新查询 i 遮住键 j，例如 mask[n_past:n_past + n_new, :n_past + n_new]"),
    "mutant.mask_only_without_cache": ("no causal mask once there is a cache: a chunk of several new tokens still must "
                                       "not see its own later tokens",
                                       "有了缓存就不加因果掩码了：一次输入多个新 token 时，每个 token 仍然不能看到同一段里"
                                       "排在它后面的 token"),
    "mutant.mask_square_slice": ("mask sliced [:n_new, :n_new]: with a cache it must cover all n_past + n_new keys, "
                                 "mask[n_past:n_past + n_new, :n_past + n_new]",
                                 "掩码切成了 [:n_new, :n_new]：有缓存时它必须覆盖全部 n_past + n_new 个键，即 "
                                 "mask[n_past:n_past + n_new, :n_past + n_new]"),
    "mutant.cache_only_new": ("present holds only the new tokens: return the concatenated past + new keys and values",
                              "present 里只有新 token 的键和值：应当返回过去与新 token 拼接后的全部键和值"),
    "mutant.cache_not_updated": ("cache not updated: present returns the old past_key_value instead of past + new "
                                 "keys/values",
                                 "缓存没有更新：present 返回的是旧的 past_key_value，而不是过去加上新 token 的键/值"),
    "mutant.cache_wrong_axis": ("cache concatenated on the wrong axis: keys/values are [b, num_heads, n, head_dim], "
                                "concatenate on dim=2 (the tokens)",
                                "缓存拼接的维度不对：键/值的形状是 [b, num_heads, n, head_dim]，应当在 dim=2（token 维）"
                                "上拼接"),
    "mutant.softmax_overflow": ("softmax without subtracting the row max: exp() overflows to inf for large scores and "
                                "the weights become NaN; use torch.softmax (or subtract scores.amax(-1, keepdim=True))",
                                "softmax 没有先减去每行的最大值：分数很大时 exp() 溢出成 inf，权重变成 NaN；请用 "
                                "torch.softmax（或先减去 scores.amax(-1, keepdim=True)）"),
    "mutant.grad_detached_kv": ("no gradient reaches W_key and W_value: keys/values are .detach()ed (or rebuilt from "
                                ".data); keep them in the autograd graph",
                                "梯度传不到 W_key 和 W_value：键/值被 .detach() 了（或用 .data 重新构造）；要让它们留在 "
                                "autograd 的计算图里"),
    "mutant.grad_detached_weights": ("no gradient flows through the attention weights to W_query and W_key: they are "
                                     ".detach()ed or computed outside autograd (.numpy(), .tolist(), "
                                     "torch.tensor(...))",
                                     "梯度无法经过注意力权重传到 W_query 和 W_key：权重被 .detach() 了，或是在 autograd "
                                     "之外算的（.numpy()、.tolist()、torch.tensor(...)）"),
    "mutant.grad_none": ("the output carries no gradient: forward runs under torch.no_grad() (or detaches its result), "
                         "so the module could never be trained",
                         "输出不带梯度：forward 在 torch.no_grad() 下运行（或把结果 detach 了），这样的模块根本没法训练"),
    "mutant.grad_leaves_autograd": ("forward fails when gradients are on: the computation leaves autograd (.numpy() "
                                    "on a tensor that requires grad); use torch operations throughout",
                                    "开启梯度时 forward 会出错：计算离开了 autograd（对需要梯度的张量调用了 .numpy()）；"
                                    "请全程使用 torch 运算"),
    "mutant.split_merge_no_transpose": ("heads split with view(b, num_heads, T, head_dim) and merged back with "
                                        "view(b, T, d_out), without transposes: each 'head' then mixes tokens; use "
                                        "view(b, T, num_heads, head_dim).transpose(1, 2) and transpose back before "
                                        "merging",
                                        "拆分多头用了 view(b, num_heads, T, head_dim)，合并又用了 view(b, T, d_out)，"
                                        "两处都没有转置：这样每个“头”里混着不同 token 的特征；请用 "
                                        "view(b, T, num_heads, head_dim).transpose(1, 2)，合并前再转置回来"),
    "mutant.cache_ignores_past": ("the module ignores past_key_value: it keeps its own cache (or recomputes from "
                                  "stored inputs), so a past it did not produce, or two sequences decoded in turns, "
                                  "give wrong outputs; attend to the past_key_value you are given",
                                  "模块忽略了传入的 past_key_value：它自己保存缓存（或用存下来的输入重新计算），所以遇到"
                                  "不是它自己产生的 past，或两个序列交替解码时，输出就错了；请对传入的 past_key_value "
                                  "做注意力"),
    "mutant.dropout_ignored": ("dropout has no effect in training mode: apply self.dropout(p) to the attention weights",
                               "训练模式下 dropout 没有起作用：要对注意力权重应用 self.dropout(p)"),
    "mutant.dropout_on_scores": ("dropout applied to the scores before the softmax: it must act on the attention "
                                 "weights after the softmax (dropped weights are 0, the others scaled by 1/(1-p))",
                                 "dropout 作用在了 softmax 之前的分数上：它应当作用在 softmax 之后的注意力权重上"
                                 "（被丢弃的权重为 0，其余的乘以 1/(1-p)）"),
    "mutant.dropout_on_output": ("dropout applied to the output instead of the attention weights",
                                 "dropout 作用在了输出上，应当作用在注意力权重上"),
    "mutant.dropout_wrong": ("in training mode the output is not attention with dropout on the weights: each weight "
                             "must be either 0 or weight/(1-p), with dropout p",
                             "训练模式下的输出不是“对注意力权重做 dropout”的结果：每个权重要么是 0，要么是 "
                             "weight/(1-p)（p 是 dropout 概率）"),
    "mutant.dropout_in_eval": ("dropout active in eval mode: outputs change from call to call after .eval(); use "
                               "self.dropout = nn.Dropout(p) (or dropout_p=p if self.training else 0.0)",
                               "eval 模式下 dropout 仍在起作用：调用 .eval() 之后每次调用的输出都不一样；请用 "
                               "self.dropout = nn.Dropout(p)（或 dropout_p=p if self.training else 0.0）"),

    # ---------------------------------------------------------------------------------------- mistakes (08-10)
    "mutant.rope_on_values": ("values rotated too: RoPE turns only the queries and the keys (positions belong in the "
                              "scores); leave V as it is",
                              "值也被旋转了：RoPE 只旋转查询和键（位置信息应当体现在注意力分数里）；V 保持不变"),
    "mutant.rope_positions_restart": ("positions restart at 0 after the cache: the new tokens sit at positions n_past, "
                                      "n_past + 1, ... with n_past = past_key_value[0].shape[2] (the same offset as "
                                      "the mask's rows)",
                                      "有缓存时位置又从 0 开始了：新 token 的位置应当是 n_past, n_past + 1, ...，其中 "
                                      "n_past = past_key_value[0].shape[2]（和掩码行的偏移相同）"),
    "mutant.rope_interleaved_pairs": ("features paired as (2i, 2i + 1), the interleaved (GPT-J) layout: the "
                                      "contract's rotate-half layout pairs feature i with i + head_dim / 2, x * cos + "
                                      "rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1) and cos/sin = "
                                      "cat(freqs, freqs)",
                                      "特征按 (2i, 2i + 1) 两两配对，这是交错（GPT-J）布局：接口约定用的是 rotate-half "
                                      "布局，把第 i 个特征和第 i + head_dim / 2 个配对，即 x * cos + rotate_half(x) * "
                                      "sin，其中 rotate_half(x) = cat(-x2, x1)，cos/sin = cat(freqs, freqs)"),
    "mutant.rope_freq_d_model": ("RoPE frequencies computed from d_out (d_model) instead of head_dim: theta_i = base "
                                 "** (-2i / head_dim), since RoPE rotates each head's features",
                                 "RoPE 的频率是按 d_out（d_model）算的，应当按 head_dim 算：theta_i = base ** "
                                 "(-2i / head_dim)，因为 RoPE 旋转的是每个头自己的特征"),
    "mutant.rope_after_cache": ("RoPE applied after the cache: rotate the new keys at their positions BEFORE "
                                "appending them; present holds rotated keys, and cached keys are never rotated again",
                                "RoPE 加在了缓存之后：应当先把新的键按各自的位置旋转，再追加进缓存；present 里存的是"
                                "旋转过的键，缓存里的键不会再被旋转"),
    "mutant.rope_missing": ("no rotation: apply RoPE to the queries and keys", "没有做旋转：要对查询和键应用 RoPE"),
    "mutant.rope_wrong_direction": ("rotated the wrong way: rotate_half(x) = cat(-x2, x1), and the rotation is "
                                    "x * cos + rotate_half(x) * sin",
                                    "旋转方向反了：rotate_half(x) = cat(-x2, x1)，旋转是 x * cos + rotate_half(x) * sin"),
    "mutant.rope_exponent_off_by_one": ("RoPE's frequencies counted from the wrong index: theta_i = base ** (-2i / "
                                        "d) for i = 0 .. d/2 - 1, with d the rotated width (head_dim; rope_dim in "
                                        "MLA), i.e. torch.arange(0, d, 2) / d, so the first pair turns by one radian "
                                        "per position",
                                        "RoPE 频率的下标数错了：theta_i = base ** (-2i / d)，i = 0 .. d/2 - 1，d 是被"
                                        "旋转的宽度（head_dim；MLA 里是 rope_dim），即 torch.arange(0, d, 2) / d，"
                                        "第一对特征每个位置正好转 1 弧度"),
    "mutant.rope_exponent_no_two": ("RoPE's exponent lacks its factor 2: theta_i = base ** (-2i / d), with d the "
                                    "rotated width (head_dim; rope_dim in MLA), i.e. torch.arange(0, d, 2) / d, not "
                                    "torch.arange(d // 2) / d (the slowest pair must turn by about 1 / base per "
                                    "position)",
                                    "RoPE 的指数少了因子 2：theta_i = base ** (-2i / d)，d 是被旋转的宽度（head_dim；"
                                    "MLA 里是 rope_dim），即 torch.arange(0, d, 2) / d，而不是 torch.arange(d // 2) / d"
                                    "（转得最慢的那一对每个位置应当只转约 1 / base 弧度）"),
    "mutant.rope_half_angles_on_pairs": ("the rotate-half layout's angles (cos/sin = cat(freqs, freqs)) on interleaved "
                                         "pairs (2i, 2i + 1): in the contract's rotate-half layout feature i pairs "
                                         "with i + head_dim / 2, rotate_half(x) = cat(-x2, x1), and the two features "
                                         "of a pair share one angle",
                                         "用了 rotate-half 布局的角度表（cos/sin = cat(freqs, freqs)），却按交错方式 "
                                         "(2i, 2i + 1) 配对：接口约定的 rotate-half 布局把第 i 个特征和第 i + "
                                         "head_dim / 2 个配对，rotate_half(x) = cat(-x2, x1)，同一对的两个特征共用一个"
                                         "角度"),
    "mutant.rope_pair_angles_on_half": ("the interleaved layout's angles (freqs.repeat_interleave(2)) with "
                                        "rotate_half: features i and i + head_dim / 2 are one pair and share one "
                                        "angle, so cos/sin = cat(freqs, freqs)",
                                        "用了交错布局的角度表（freqs.repeat_interleave(2)），却配上了 rotate_half："
                                        "第 i 个和第 i + head_dim / 2 个特征是一对，共用一个角度，所以 cos/sin = "
                                        "cat(freqs, freqs)"),
    "mutant.mla_absorb_per_head_in_out": ("W_uk/W_uv split into heads as view(num_heads, kv_latent_dim, head_dim): "
                                          "nn.Linear stores the weight as (out = num_heads * head_dim, in = "
                                          "kv_latent_dim), so head h's block is weight.view(num_heads, head_dim, "
                                          "kv_latent_dim)[h]",
                                          "W_uk/W_uv 按 view(num_heads, kv_latent_dim, head_dim) 拆成了各个头："
                                          "nn.Linear 把权重存成 (out = num_heads * head_dim, in = kv_latent_dim)，"
                                          "所以头 h 的那一块是 weight.view(num_heads, head_dim, kv_latent_dim)[h]"),
    "mutant.mla_absorb_heads_minor": ("W_uk/W_uv split into heads as view(head_dim, num_heads, kv_latent_dim): head h "
                                      "owns the head_dim consecutive rows from h * head_dim, so its block is "
                                      "weight.view(num_heads, head_dim, kv_latent_dim)[h]",
                                      "W_uk/W_uv 按 view(head_dim, num_heads, kv_latent_dim) 拆成了各个头：头 h 占的是"
                                      "从第 h * head_dim 行起连续的 head_dim 行，所以它那一块是 weight.view(num_heads, "
                                      "head_dim, kv_latent_dim)[h]"),
    "mutant.mla_absorb_t_reshape": ("W_uk/W_uv transposed, then reshaped (weight.T.reshape(num_heads, head_dim, "
                                    "kv_latent_dim)): a reshape after a transpose reorders the numbers; split first, "
                                    "weight.view(num_heads, head_dim, kv_latent_dim), then transpose the last two "
                                    "axes where you need (kv_latent_dim, head_dim)",
                                    "W_uk/W_uv 先转置再 reshape（weight.T.reshape(num_heads, head_dim, "
                                    "kv_latent_dim)）：转置之后再 reshape 会把数的顺序打乱；应当先拆头，"
                                    "weight.view(num_heads, head_dim, kv_latent_dim)，需要 (kv_latent_dim, head_dim) "
                                    "时再转置最后两维"),
    "mutant.mla_rope_on_absorbed_latents": ("RoPE rotated into the absorbed latents: with absorb=True only q_rope and "
                                            "k_rope rotate, as without; rotating q_nope @ W_uk (or c_kv) in the "
                                            "latent space changes the scores, and absorb=True must give the same "
                                            "output as absorb=False",
                                            "在矩阵吸收后的潜在空间里也做了 RoPE：absorb=True 时和不吸收时一样，只旋转 "
                                            "q_rope 和 k_rope；在潜在空间里旋转 q_nope @ W_uk（或 c_kv）会改变注意力"
                                            "分数，而 absorb=True 的输出必须和 absorb=False 的相同"),
    "mutant.max_not_updated": ("the running maximum is never updated (m = m_new is missing): each new tile rescales "
                               "everything before it by exp(-inf) = 0, so only the last tile counts",
                               "运行最大值从未更新（缺了 m = m_new）：每个新分块都会把之前的结果乘以 exp(-inf) = 0，"
                               "最后只剩最后一个分块的贡献"),
    "mutant.no_running_max": ("exp of the raw scores: without subtracting the running maximum exp overflows to inf "
                              "(scores in the hundreds give NaN); use p = exp(s - m_new)",
                              "直接对原始分数取了 exp：不减去运行最大值，exp 会溢出成 inf（分数上百时得到 NaN）；请用 "
                              "p = exp(s - m_new)"),
    "mutant.output_not_rescaled": ("the partial output is not rescaled when the maximum grows: acc = exp(m - m_new) * "
                                   "acc + p @ v",
                                   "最大值变大时没有重新缩放已经累加的输出：acc = exp(m - m_new) * acc + p @ v"),
    "mutant.sum_not_rescaled": ("the running sum is not rescaled when the maximum grows: l = exp(m - m_new) * l + "
                                "p.sum(-1)",
                                "最大值变大时没有重新缩放累加和：l = exp(m - m_new) * l + p.sum(-1)"),
    "mutant.divided_too_early": ("divided by the sum inside the loop: keep acc unnormalised and divide by l once, "
                                 "after the last tile",
                                 "在循环里就除以了和：acc 应当保持未归一化，等最后一个分块算完再除以 l，只除一次"),
    "mutant.causal_blocks_skipped_wrongly": ("causal tiles skipped wrongly: the tile on the diagonal must be computed "
                                             "(with its mask); skip only key tiles that start after the block's last "
                                             "query",
                                             "因果分块跳错了：对角线上的分块必须计算（并加上掩码）；只有起点在该块最后一个"
                                             "查询之后的键分块才能跳过"),
    "mutant.causal_tile_not_masked": ("the diagonal tile is computed without the causal mask: inside a tile crossing "
                                      "the diagonal, hide key j from query i when j > i",
                                      "对角线上的分块没有加因果掩码：在跨过对角线的分块里，当 j > i 时要对查询 i 遮住键 j"),
    "mutant.lse_without_max": ("the log-sum-exp lacks the maximum: lse = m + log(l)",
                               "对数和指数（LSE）少加了最大值：lse = m + log(l)"),
    "mutant.no_scale_online": ("scores are not scaled: multiply q @ k^T by 1/sqrt(head_dim)",
                               "注意力分数没有缩放：要把 q @ k^T 乘以 1/sqrt(head_dim)"),
    "mutant.scores_materialised": ("the outputs are right, but the full (n_q, n_k) score matrix, or a (block, n_k) "
                                   "strip of it with a plain softmax, is built: compute one (block, block) tile of "
                                   "scores at a time, with the running max and sum",
                                   "输出是对的，但构造了完整的 (n_q, n_k) 分数矩阵，或用普通 softmax 算了"
                                   "其中一整条 (block, n_k) 的行带：应当一次只算一个 (block, block) 的分数分块，"
                                   "配合运行中的最大值和和"),
    "mutant.mla_absorb_ignored": ("absorb=True runs the explicit path: per-head keys or values of every cached "
                                  "token are built (W_uk(c_kv) or W_uv(c_kv)); absorbed, the query becomes q_h @ "
                                  "W_uk_h and attends to c_kv directly, and the weights times c_kv go through W_uv_h "
                                  "afterwards",
                                  "absorb=True 时走的仍是显式路径：为每个缓存的 token 构造了每个头的键或值"
                                  "（W_uk(c_kv) 或 W_uv(c_kv)）；矩阵吸收时，查询变成 q_h @ W_uk_h，直接对 c_kv "
                                  "做注意力，注意力权重乘 c_kv 之后再经过 W_uv_h"),
    # exercise 13 (paged_decode): the paged cache's slots and copy-on-write, split-K's merge
    "mutant.block_table_slot_without_block_size": (
        "slot = block_table[pos // block_size] + pos % block_size: a block number is not a slot number; multiply it "
        "by block_size",
        "slot = block_table[pos // block_size] + pos % block_size：块号不是槽位号，要先乘以 block_size"),
    "mutant.block_table_ignored": (
        "the sequence's tokens were read as if its blocks were adjacent in the pool: look each position's block up "
        "in the block table, block_table[pos // block_size]",
        "把序列的 token 当成在池中连续存放来读：每个位置的块要到块表里查，block_table[pos // block_size]"),
    "mutant.shared_block_written_without_copy": (
        "a block another sequence also lists was written in place, changing that sequence's tokens: copy the block "
        "into a free one first and point the table there (copy-on-write)",
        "直接写入了另一条序列也在用的共享块，改掉了那条序列的 token：先把这个块复制到一个空闲块，让块表指向新块，"
        "再写入（写时复制）"),
    "mutant.copy_on_write_without_data": (
        "copy-on-write took a free block but did not copy the shared block's tokens into it",
        "写时复制拿到了空闲块，但没有把共享块里已有的 token 复制过去"),
    "mutant.new_token_not_attended": (
        "the new token's own key and value are written but not attended: each sequence attends to seq_len + 1 "
        "tokens",
        "新 token 的键和值写进去了，却没有参与注意力：每条序列要看 seq_len + 1 个 token"),
    "mutant.merge_without_rescaling": (
        "the chunks' outputs were averaged: weight each out_i by exp(lse_i - max lse), then divide by the sum of "
        "the weights",
        "直接对各块的输出取了平均：要用 exp(lse_i - max lse) 给每个 out_i 加权，再除以权重之和"),
    "mutant.merge_summed": (
        "the chunks' outputs were added: each is already normalised by its own chunk's sum; weight them by "
        "exp(lse_i - max lse) and divide by the sum of the weights",
        "直接把各块的输出相加：每个 out_i 已经按本块自己的和归一化过，要用 exp(lse_i - max lse) 加权，再除以权重之和"),
    "mutant.merge_without_max": (
        "the merge computes exp(lse_i) without subtracting the largest lse, which overflows for large scores: use "
        "exp(lse_i - max lse)",
        "合并时直接算 exp(lse_i)，没有减去最大的 lse，分数大时会溢出：要用 exp(lse_i - max lse)"),
    "mutant.merge_not_normalised": (
        "the weighted chunk outputs were not divided by the sum of the weights",
        "各块输出加权求和之后，没有除以权重之和"),
    "mutant.merge_wrong_lse": (
        "the merged lse is the largest lse_i: it is max + log(sum of the weights exp(lse_i - max))",
        "合并后的 lse 取成了最大的 lse_i：应当是 max + log(权重 exp(lse_i - max) 之和)"),
    "mutant.mla_cache_up_projected": ("the cache holds up-projected per-head keys/values: MLA caches only the latent "
                                      "c_kv (b, n, kv_latent_dim) and the shared rotated k_rope (b, n, rope_dim)",
                                      "缓存里存的是上投影后每个头的键/值：MLA 只缓存潜在向量 c_kv (b, n, kv_latent_dim) "
                                      "和各头共享、已旋转的 k_rope (b, n, rope_dim)"),
    "mutant.mla_rope_on_compressed_key": ("RoPE applied to the compressed latent c_kv: rotate only the decoupled "
                                          "q_rope and k_rope; c_kv stays position-free so that W_uk can be absorbed",
                                          "对压缩后的潜在向量 c_kv 做了 RoPE：只应旋转解耦出来的 q_rope 和 k_rope；c_kv "
                                          "不能带位置信息，W_uk 才能被矩阵吸收"),
    "mutant.mla_rope_on_nope": ("RoPE applied to the up-projected (nope) queries/keys: only the rope_dim parts rotate",
                                "对上投影得到的（nope）查询/键也做了 RoPE：只有 rope_dim 那部分需要旋转"),
    "mutant.mla_absorb_wrong_transpose": ("absorbed with the wrong transpose: nn.Linear stores W_uk and W_uv as (out = "
                                          "num_heads * head_dim, in = kv_latent_dim), so head h's block is "
                                          "weight.view(num_heads, head_dim, kv_latent_dim)[h], and the absorbed query "
                                          "is q_h @ W_uk_h",
                                          "矩阵吸收时转置错了：nn.Linear 把 W_uk 和 W_uv 存成 (out = num_heads * "
                                          "head_dim, in = kv_latent_dim)，所以头 h 的那一块是 weight.view(num_heads, "
                                          "head_dim, kv_latent_dim)[h]，吸收后的查询是 q_h @ W_uk_h"),
    "mutant.mla_scale_without_rope": ("scores scaled by 1/sqrt(head_dim): a head's query and key have head_dim + "
                                      "rope_dim features, scale by 1/sqrt(head_dim + rope_dim)",
                                      "注意力分数乘的是 1/sqrt(head_dim)：每个头的查询和键有 head_dim + rope_dim 个特征，"
                                      "应当乘以 1/sqrt(head_dim + rope_dim)"),
    "mutant.rope_missing_mla": ("no rotation: apply RoPE to q_rope and k_rope", "没有做旋转：要对 q_rope 和 k_rope 应用 RoPE"),
    "mutant.cache_only_new_mla": ("present holds only the new tokens: return the concatenated past + new c_kv and "
                                  "k_rope",
                                  "present 里只有新 token 的部分：应当返回过去与新 token 拼接后的 c_kv 和 k_rope"),
    "mutant.mask_top_left_chunk": ("causal mask aligned to the start of the cache: the new queries are the LAST "
                                   "positions; hide key j from new query i when j > n_past + i",
                                   "因果掩码对齐到了缓存的开头：新的查询在序列的最后几个位置；当 j > n_past + i 时，"
                                   "要对新查询 i 遮住键 j"),

    # ---------------------------------------------------------------------------------------- mistakes (12)
    "mutant.ring_read_in_slot_order": ("after the wrap-around the ring is read in slot order (slot 0 first) but "
                                       "masked as if oldest first: keys and positions disagree. Read from the oldest "
                                       "slot, num_sinks + (start_pos - num_sinks) % window, round to the newest (or "
                                       "give each slot the position it holds and mask by that)",
                                       "环形缓冲区绕回之后是按槽位顺序（从槽 0 开始）读的，掩码却按“从旧到新”来算：键和"
                                       "位置对不上了。应当从最旧的槽 num_sinks + (start_pos - num_sinks) % window "
                                       "开始，绕一圈读到最新的（或者给每个槽标上它存的位置，再按位置做掩码）"),
    "mutant.rope_positions_reset_at_wrap": ("RoPE positions restart at the wrap-around (the slot index, not the "
                                            "position): rotate queries and keys at the absolute positions start_pos, "
                                            "start_pos + 1, ..., which keep counting after the ring wraps",
                                            "RoPE 的位置在环形缓冲区绕回时又从头开始了（用的是槽位编号而不是位置）："
                                            "查询和键要按绝对位置 start_pos, start_pos + 1, ... 旋转，绕回之后位置"
                                            "仍然继续往上数"),
    "mutant.sinks_evicted": ("the sinks are evicted with the window: the first num_sinks tokens stay visible to every "
                             "query (key j is visible when j <= i and (j > i - window or j < num_sinks))",
                             "注意力汇聚点随窗口一起被逐出了：前 num_sinks 个 token 应当对每个查询都可见（当 j <= i "
                             "且 (j > i - window 或 j < num_sinks) 时键 j 可见）"),
    "mutant.window_off_by_one": ("the window is off by one: a query at position i sees the window keys i - window + "
                                 "1 .. i, itself included (Hugging Face's sliding_window: j > i - window)",
                                 "窗口差了一位：位置 i 的查询看到的是 i - window + 1 .. i 这 window 个键，包括它自己"
                                 "（和 Hugging Face 的 sliding_window 一致：j > i - window）"),
    "mutant.ring_keys_cached_before_rope": ("the ring holds the keys before RoPE: rotate the new keys at their "
                                            "absolute positions BEFORE writing them into their slots; present holds "
                                            "rotated keys, and a cached key is never rotated again",
                                            "环形缓冲区里存的是旋转之前的键：应当先把新的键按各自的绝对位置旋转，再写进"
                                            "对应的槽；present 里存的是旋转过的键，缓存里的键不会再被旋转"),
    "mutant.ring_cache_grows": ("the cache grows with the sequence (torch.cat, nothing evicted): its memory must stay "
                                "constant, keys and values of shape (b, num_heads, num_sinks + window, head_dim) from "
                                "the first call on, position p written into slot num_sinks + (p - num_sinks) % window",
                                "缓存随序列一起变长（torch.cat，什么都没有逐出）：它的内存应当保持不变，从第一次调用起"
                                "键和值的形状就是 (b, num_heads, num_sinks + window, head_dim)，位置 p 写进槽 "
                                "num_sinks + (p - num_sinks) % window"),

    # ---------------------------------------------------------------------------------------- the capstone
    "mutant.previous_token_head": ("that is the previous-token head (前一词元头), layer 0's stripe just below the "
                                   "diagonal: the induction head (归纳头) attends from the second copy to the token "
                                   "AFTER the earlier occurrence of the current token",
                                   "这是前一词元头（previous-token head），也就是第 0 层紧贴对角线下方的那条斜线：归纳头"
                                   "（induction head）在序列的第二遍里关注的是当前 token 上一次出现位置的下一个 token"),
    "mutant.layer_one_based": ("the layer is off by one: layers are counted from 0 (model.blocks[0] is the first), so "
                               "return the index into model.blocks",
                               "层号差了 1：层从 0 开始编号（model.blocks[0] 是第一层），请返回它在 model.blocks 中的下标"),
    "mutant.one_based": ("layer and head are both off by one: count from 0, as model.blocks and the head axis of the "
                         "attention weights do",
                         "层号和头号都差了 1：要从 0 开始数，和 model.blocks 以及注意力权重里头的维度一样"),
    "mutant.flat_index_unravelled": ("the (layer, head) pair comes from a flat index unravelled with the wrong size: "
                                     "for a (n_layers, n_heads) score table use divmod(index, n_heads)",
                                     "(layer, head) 是用错误的尺寸从一维下标还原出来的：对形状为 (n_layers, n_heads) "
                                     "的分数表，应当用 divmod(index, n_heads)"),
    "mutant.last_layer_assumed": ("the answer assumes the induction head is in the last layer: score every layer (a "
                                  "layer may sit after it)",
                                  "这个答案默认归纳头在最后一层：要给每一层都打分（它后面可能还有别的层）"),
    "mutant.largest_weight_norm": ("the answer is the head with the largest weights: a weight norm says nothing about "
                                   "what a head does (a silent head can have the largest weights); score what each "
                                   "head attends to on repeated sequences, or ablate it",
                                   "这个答案是权重最大的那个头：权重范数说明不了一个头在做什么（一个不起作用的头也可能"
                                   "权重最大）；请在重复序列上给每个头的注意力模式打分，或者逐个消融"),
    "mutant.checkpoint_metadata": ("the answer is the one the checkpoint recorded at training: the graded models' "
                                   "heads were moved, so only what the heads of the model you are given do finds it",
                                   "这个答案是训练时检查点里记下的那个头：被评分的模型的头已经被挪动过，只有看你拿到的"
                                   "这个模型里各个头实际在做什么才能找到它"),
    "capstone.not_a_pair": ("returned {answer}; the contract is a tuple (layer, head) of ints",
                            "返回了 {answer}；接口约定要求返回由整数组成的元组 (layer, head)"),
    "capstone.not_induction": ("returned {answer}, which is not the induction head", "返回了 {answer}，这不是归纳头"),
    "capstone.contract": ("contract: return a tuple (layer, head) of ints", "接口约定：返回由整数组成的元组 (layer, head)"),
    "capstone.not_a_function": ("contract: {name} must be a function, got {type}",
                                "接口约定：{name} 必须是函数，你给的是 {type}"),
    "capstone.wrong_head": ("not the induction head, and no known mistake explains the answers: score every head of "
                            "every layer on repeated random tokens, as the notebook does",
                            "找到的不是归纳头，也没有哪种已知的常见错误能解释这些答案：像笔记本里那样，在重复的随机 "
                            "token 序列上给每一层的每个头打分"),

    # ---------------------------------------------------------------------------------------- interview dialects
    "assumed": ("graded as the {name} dialect; mask convention: {mask}", "按照{name}的写法评分；掩码约定：{mask}"),
    "assumed.no_bias": ("graded as the {name} dialect; mask convention: {mask}; no bias on {roles}",
                        "按照{name}的写法评分；掩码约定：{mask}；{roles} 没有 bias"),
    "dialect.book": ("book", "书中"),
    "dialect.annotated": ("annotated transformer", "annotated transformer 教程"),
    "dialect.signature": ("{signature}", "构造参数为 {signature}"),
    "mask.built_in": ("built in", "内置（模块自己加因果掩码）"),
    "mask.keep": ("True = keep (mask == 0 hidden)", "True = 保留（mask == 0 处被遮住）"),
    "mask.hidden": ("True = hidden", "True = 遮住"),
    "mask.additive": ("additive (0 / -inf)", "加性掩码（0 / -inf）"),
    "mask.not_causal": ("{mask} (no convention made it causal)", "{mask}（没有哪种约定能让它满足因果性）"),

    # ---------------------------------------------------------------------------------------- interview follow-ups
    "q.llama2_7b": ("Llama-2-7B (32 layers, 32 heads, 32 KV heads, head_dim 128)",
                    "Llama-2-7B（32 层，32 个头，32 个 KV 头，head_dim 128）"),
    "q.kv_cache_bytes": ("bytes of the KV cache of {model} for one sequence of 4096 tokens in float16",
                         "{model} 用 float16 处理一条 4096 个 token 的序列时，KV 缓存占多少字节"),
    "q.kv_cache_bytes.only_k": ("that is only K (or only V): the cache holds both, a factor of 2",
                                "这只是 K（或只是 V）：缓存里两个都要存，差了 2 倍"),
    "q.kv_cache_bytes.float32": ("4 bytes per number is float32; the question says float16 (2 bytes)",
                                 "每个数 4 字节是 float32；题目说的是 float16（2 字节）"),
    "q.kv_cache_bytes.one_layer": ("that is one layer's cache: multiply by the 32 layers",
                                   "这只是一层的缓存：还要乘以 32 层"),
    "q.kv_cache_bytes.gib": ("2 GiB is right, but the question asks for bytes: 2 * 2**30",
                             "2 GiB 是对的，但题目问的是字节数：2 * 2**30"),
    "q.score_flops": ("FLOPs of the whole 4096 x 4096 score matrix Q·Kᵀ (masked entries too) in one layer of {model}, "
                      "batch 1, prefill (a multiply-add counts as 2 FLOPs)",
                      "{model} 的一层在预填充（prefill）4096 个 token、batch 为 1 时，算完整的 4096 x 4096 分数矩阵 Q·Kᵀ"
                      "（被因果掩码遮住的位置也算）要多少 FLOPs（一次乘加算 2 个 FLOPs）"),
    "q.score_flops.multiply_adds": ("that is half the answer: either multiply-adds (each is 2 FLOPs) or only the causal "
                                    "half of the matrix; the question counts FLOPs over the whole matrix, as a matmul "
                                    "computes it before the mask is applied",
                                    "这是答案的一半：要么算的是乘加次数（每次乘加是 2 个 FLOPs），要么只算了因果掩码留下的"
                                    "那一半；题目问的是整个矩阵的 FLOPs，矩阵乘法在加掩码之前就把它全算了"),
    "q.score_flops.causal_multiply_adds": ("that is a quarter of the answer: multiply-adds (2 FLOPs each) over the "
                                           "causal half only; the question counts FLOPs over the whole matrix",
                                           "这是答案的四分之一：只数了因果掩码留下的那一半，而且数的是乘加次数（每次是 "
                                           "2 个 FLOPs）；题目问的是整个矩阵的 FLOPs"),
    "q.score_flops.one_head": ("that is one head: there are 32", "这只是一个头：一共有 32 个"),
    "q.score_flops.d_model": ("the inner dimension of Q·Kᵀ per head is head_dim (128), not d_model; over 32 heads that "
                              "is 4096 in total, so this is right only if you also dropped the heads",
                              "每个头的 Q·Kᵀ 的内积维度是 head_dim（128），不是 d_model；32 个头加起来才是 4096，"
                              "所以只有在你同时漏掉了头数时这个数才对"),
    "q.grows_with_context": ("during decoding, what is kept from one step to the next and grows with the context "
                             "length: 'queries', 'keys and values' or 'parameters' (the model's weight matrices)?",
                             "解码时，哪一项要从一步保留到下一步、并且随上下文长度增长：'queries'、'keys and values' "
                             "还是 'parameters'（模型的权重矩阵）？"),
    "q.grows_with_context.queries": ("only the new token's query is needed at each step: that is why the cache holds "
                                     "no Q",
                                     "每一步只需要新 token 的查询：这正是缓存里不存 Q 的原因"),
    "q.grows_with_context.weights": ("the parameters (the model's weight matrices) are fixed, whatever the context "
                                     "length; what grows is the cache of keys and values",
                                     "参数（模型的权重矩阵）是固定的，与上下文长度无关；随上下文增长的是键和值的缓存"),
    "q.grows_with_context.attention_weights": ("the new token's attention weights do have one entry per cached token, "
                                               "but they are computed afresh at each step and not kept; what is kept, "
                                               "and grows, is the cache of keys and values",
                                               "新 token 的注意力权重确实每个缓存的 token 对应一项，但它们每一步都重新"
                                               "计算，不会保留下来；保留下来并不断增长的是键和值的缓存"),
    "q.not_it": ("{value} is not it: {question}", "{value} 不对：{question}"),
    "q.not_a_number": ("expected a number, got {value}", "这里要填一个数，你给的是 {value}"),
    "q.ratio": ("{value:g} is {ratio:.3g} times the answer: recount the factors of {question}",
                "{value:g} 是正确答案的 {ratio:.3g} 倍：请重新数一数这道题里的各个因子：{question}"),
    "q.line": ("{question}: {why}", "{question}：{why}"),

    # ---------------------------------------------------------------------------------------- reading submissions
    "source.at_line": ("{name} (line {line})", "{name}（第 {line} 行）"),
    "source.not_a_submission": ("{name}: only .py and .ipynb submissions are graded", "{name}：只评 .py 和 .ipynb 文件"),
    "source.cannot_read": ("cannot read {name}: {error}", "无法读取 {name}：{error}"),
    "source.invalid_json": ("{name} is not a valid notebook (invalid JSON: {error})",
                            "{name} 不是有效的笔记本（JSON 格式错误：{error}）"),
    "source.no_cells": ("{name} is not a valid notebook (no list of cells)", "{name} 不是有效的笔记本（没有单元格列表）"),
    "source.empty": ("the file is empty", "文件是空的"),
    "source.too_big": ("the file is larger than {limit} MiB, more than an exercise needs: not read",
                       "文件超过 {limit} MiB，比任何练习需要的都大：没有读取"),
    "source.too_much_code": ("the file holds {size} KiB of code, more than the grader reads ({limit} KiB)",
                             "文件里有 {size} KiB 代码，超过评分器读取的上限（{limit} KiB）"),
    "source.not_utf8": ("the file is not UTF-8 text (byte {position})", "文件不是 UTF-8 文本（第 {position} 个字节）"),
    "source.too_deep": ("nested too deeply", "嵌套太深"),
    "source.skipped_magic": ("skipped a %%{name} cell (not Python)", "跳过了一个 %%{name} 单元格（不是 Python 代码）"),

    # ---------------------------------------------------------------------------------------- running submissions
    "run.cell_note": ("cell {cell}: {note}", "单元格 {cell}：{note}"),
    "run.interview_detected": ("graded as {exercise} (interview mode): no check() call names an exercise, and the "
                               "file's classes are no exercise's contract; pass --exercise to choose another",
                               "按 {exercise}（面试模式）评分：没有 check() 调用指明练习，文件里的类也不符合任何练习的接口"
                               "约定；要按别的练习评分，请加 --exercise"),
    "run.no_exercise": ('no exercise found: no check("id", ...) call and no contract class name',
                        '没有找到练习：既没有 check("id", ...) 调用，也没有接口约定里的类名'),
    "run.timeout": ("grading stopped after {seconds:g} s (an infinite loop?)", "评分在 {seconds:g} 秒后被终止（是不是有死循环？）"),
    "run.too_large": ("the submission's grading result was too large", "这份提交返回的评分结果太大了"),
    "run.ended": ("the submission ended the grading process (exit code {code}) before any result{memory}{tail}",
                  "这份提交在给出任何结果之前就结束了评分进程（退出码 {code}）{memory}{tail}"),
    "run.ended_memory": (", out of memory?", "，是不是内存不足？"),
    "run.ended_tail": (": {text}", "：{text}"),
    "run.unreadable": ("unreadable grading result ({type})", "评分结果无法读取（{type}）"),
    "run.malformed": ("malformed grading result: {why}", "评分结果的格式不对：{why}"),
    "run.not_graded": ("{exercise} was not graded", "{exercise} 没有被评分"),
    "run.missing_hint": ("{missing} ({note})", "{missing}（{note}）"),
    "run.over_memory": ("the submission used more than {limit} MiB of memory over all its processes (shared memory "
                        "and temporary files included) and was stopped",
                        "这份提交的所有进程（含共享内存和临时文件）一共用了超过 {limit} MiB 内存，被终止了"),
    "run.over_processes": ("the submission started more than {limit} processes or threads and was stopped",
                           "这份提交启动了超过 {limit} 个进程或线程，被终止了"),
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
    "sandbox.not_linux": ("bubblewrap sandboxes need Linux (this is {platform})",
                          "bubblewrap 沙箱只能在 Linux 上用（这台机器是 {platform}）"),
    "sandbox.no_bwrap": ("bubblewrap (bwrap) is not installed: apt-get install bubblewrap",
                         "没有安装 bubblewrap (bwrap)：apt-get install bubblewrap"),
    "sandbox.no_namespaces": ("bwrap cannot create its namespaces here: {error}", "bwrap 无法在这里创建命名空间：{error}"),

    # ---------------------------------------------------------------------------------------- batches and the CLI
    "batch.title": ("# Feedback for {name}", "# {name} 的评分反馈"),
    "batch.not_graded": ("**Not graded:** {error}", "**未评分：**{error}"),
    "batch.passed": ("## {exercise}: passed ({passed}/{total} checks, {points:g} of {max:g} points)",
                     "## {exercise}：通过（{total} 项检查通过了 {passed} 项，得 {points:g} 分，满分 {max:g}）"),
    "batch.not_passed": ("## {exercise}: not passed ({passed}/{total} checks, {points:g} of {max:g} points)",
                         "## {exercise}：未通过（{total} 项检查通过了 {passed} 项，得 {points:g} 分，满分 {max:g}）"),
    "batch.problems": ("## Problems while running your code", "## 运行你的代码时出现的问题"),
    "batch.status_passed": ("passed", "通过"),
    "batch.status": ("{exercise}: {diagnosis}", "{exercise}：{diagnosis}"),
    "batch.grader_failed": ("the grader failed on this submission ({type}: {error}); please report it",
                            "评分器在这份提交上出错了（{type}：{error}）；请报告这个问题"),
    "batch.link_broken": ("a link that leads nowhere (a loop, or a missing file)", "无效的链接（循环链接，或者目标不存在）"),
    "status.not_implemented": ("not implemented yet", "还没有实现"),
    "status.missing": ("not found in the file", "文件里没有找到"),
    "status.missing_after_error": ("not found: a cell failed before it (see the feedback)",
                                   "没有找到：在它之前有单元格出错（见反馈）"),
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
    "cli.graded": ("graded {count} submissions in {seconds:.0f} s: {passed} passed everything, {failed} did not, "
                      "{errors} could not be graded, {skipped} skipped; {out}",
                      "{seconds:.0f} 秒评完了 {count} 份提交：{passed} 份全部通过，{failed} 份没有全部通过，{errors} 份无法评分，"
                      "跳过 {skipped} 个文件；{out}"),
    "batch.progress_line": ("[{done}/{count}] {name}: {status} ({seconds:.1f} s)",
                            "[{done}/{count}] {name}：{status}（{seconds:.1f} 秒）"),
    "batch.progress_bar": ("{bar} {done}/{count}, about {left:.0f} s left", "{bar} {done}/{count}，大约还要 {left:.0f} 秒"),
    "batch.link_outside": ("a link to a file outside the submissions folder", "指向提交文件夹之外的链接"),
    "batch.not_a_file": ("not a file", "不是文件"),
    "batch.not_a_submission": ("not a submission (.py or .ipynb)", "不是提交文件（.py 或 .ipynb）"),
    "batch.no_folder": ("submissions folder {folder} does not exist", "提交文件夹 {folder} 不存在"),
    "batch.out_inside": ("the output folder must not be inside the submissions folder (submissions are read-only)",
                         "输出文件夹不能放在提交文件夹里面（提交的文件只读）"),
    "cli.refuse_batch": ("error: refusing to grade a folder of submissions without a sandbox: {why}.\nSubmissions are "
                         "code from other people; install bubblewrap, or pass --trust-submissions if you trust every "
                         "file.",
                         "错误：没有沙箱，拒绝评一整个文件夹的提交：{why}。\n提交的是别人写的代码；请安装 bubblewrap，"
                         "如果你信任每一个文件，也可以加上 --trust-submissions。"),
    "cli.skipped": ("skipped {name}: {why}", "跳过了 {name}：{why}"),
    "cli.skipped_line": ("{name}: {why}", "{name}：{why}"),
    "cli.grader_failed_on": ("error: the grader failed on {names}", "错误：评分器在这些提交上出错了：{names}"),
    "cli.need_path": ("give a PATH to grade, or --batch DIR", "请给出要评分的 PATH，或者用 --batch DIR"),
    "cli.grader_failed": ("error: the grader failed: {type}: {error}", "错误：评分器出错了：{type}：{error}"),
    "cli.not_graded": ("❌ {error}", "❌ 未评分：{error}"),
    "cli.note": ("   note: {note}", "   注：{note}"),

    # ---------------------------------------------------------------------------------------- issue 29 (h2-fair)
    # interview mode: the constructor mapping and the parameters' placement the grader used, after "assumed"
    "assumed.placed": ("{assumed}; constructor: {mapping}; parameters: {placement}",
                       "{assumed}；构造参数：{mapping}；参数位置：{placement}"),
    # a notebook whose code and text, outputs dropped, is still more than the grader reads
    "source.too_big_without_outputs": ("the notebook is larger than {limit} MiB without its outputs, more than an "
                                       "exercise needs: not read",
                                       "去掉输出后笔记本仍大于 {limit} MiB，超出练习所需：未读取"),
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
    "no_class_fits": ("没有类 {name}，定义的类（{found}）也没有哪一个能单独作为多头注意力来评分：请指明要评的类，"
                      "check(\"{exercise}\", 你的类)"),
    "no_module": "没有找到 nn.Module 类（面试模式会评文件里定义的任何 nn.Module 子类，叫 {name} 或别的名字都可以）",
    "no_function": "没有找到函数 {name}",
    "not_class": "{name} 不是类",
    "not_function": "{name} 不是函数",
    "stopped": "{exercise} 的评分中途停止了：{message}",
    "accepted": ("任何 nn.Module 类（文件里只有一个就评它；有好几个就评 check() 指定的那个，否则评能跑起来的那个）；"
                 "构造函数按参数名填写：d_in/d_out（书中的写法，顺序不限）、d_model | embed_dim | hidden_size | dim "
                 "| n_embd | num_hiddens、num_heads | n_heads | n_head | nhead | heads | h 或 head_dim、dropout、"
                 "context_length | block_size | ctx_len、bias | qkv_bias、batch_first，或者一个 config 对象；"
                 "投影层命名为（大小写不限）W_query/W_key/W_value/out_proj、q_proj/k_proj/v_proj/o_proj、"
                 "W_q/W_k/W_v/W_o、wq/wk/wv/wo、w_q/w_k/w_v/w_out 或 query/key/value/out（nn.Linear，bias 可有可无，"
                 "也可以是按 x @ W 使用的裸矩阵）、linears[0..3]，或者一个融合的 qkv / c_attn / in_proj（q、k、v "
                 "依次排列）；forward(x[, mask]) 或 forward(query, key, value[, mask])，返回 out 或 (out, weights)"),
    "no_parameters": "没有参数",
    "dialect_constructor": ("无法对应构造函数的参数（{names}）：评分器按参数名填入模型宽度和头数，但两个都没找到；"
                            "最小的改法是在你的类旁边加一个两行的适配器：{adapter}。面试模式接受这些写法：{accepted}"),
    "dialect_argument": ("构造函数需要参数 {name}，评分器没法按名字替你填；最小的改法是在你的类旁边加一个两行的"
                         "适配器：{adapter}。面试模式接受这些写法：{accepted}"),
    "dialect_forward": ("无法调用 forward({names})：评分器只传入 x（或 query、key、value）和掩码，没有东西可以传给 "
                        "{extra}；最小的改法是在你的类旁边加一个两行的适配器：{adapter}。面试模式接受这些写法：{accepted}"),
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
FRAMES = {"result.assumed", "compare.cache_layout", "error.plain", "q.line", "run.ended_tail", "run.missing_hint",
          "batch.status", "cli.skipped_line"}
CATALOGUE.update(JOINS)

# the cases' names (grade/exercises/, specs_capstone), shown in "case '...'": the English name is the key
CASE_TITLES = {
    "gradients of the parameters and the input": "参数和输入的梯度",
    "scores in the hundreds (a large key bias)": "分数上百（键的 bias 很大）",
    "training mode, dropout 0.5": "训练模式，dropout 0.5",
    "d_in=3 > d_out=2, batch 2, 6 tokens": "d_in=3 > d_out=2，batch 2，6 个 token",
    "d_in=4 < d_out=6, qkv_bias, batch 3, 5 tokens": "d_in=4 < d_out=6，qkv_bias，batch 3，5 个 token",
    "unbatched (5 tokens, d_in=5) input, d_out=3": "没有 batch 维的输入（5 个 token，d_in=5），d_out=3",
    "d_in=3, d_out=2, 6 tokens = context_length, dropout 0.5": "d_in=3，d_out=2，6 个 token = context_length，dropout 0.5",
    "d_in=4 < d_out=6, 5 tokens < context_length=8, batch 3": "d_in=4 < d_out=6，5 个 token < context_length=8，batch 3",
    "d_in=6 > d_out=4, qkv_bias, 4 tokens < context_length=7": "d_in=6 > d_out=4，qkv_bias，4 个 token < context_length=7",
    "2 heads, d_in=3, d_out=2, 6 tokens = context_length": "2 个头，d_in=3，d_out=2，6 个 token = context_length",
    "3 heads, d_in=4 < d_out=5, 5 tokens < context_length=8": "3 个头，d_in=4 < d_out=5，5 个 token < context_length=8",
    "2 heads, d_in=6 > d_out=2, qkv_bias, 4 tokens < context_length=5":
        "2 个头，d_in=6 > d_out=2，qkv_bias，4 个 token < context_length=5",
    "3 heads, d_in=4 < d_out=12, 5 tokens < context_length=8, dropout 0.5":
        "3 个头，d_in=4 < d_out=12，5 个 token < context_length=8，dropout 0.5",
    "2 heads, d_in=10 > d_out=6, 6 tokens = context_length, batch 3":
        "2 个头，d_in=10 > d_out=6，6 个 token = context_length，batch 3",
    "4 heads, d_in=6, d_out=8, qkv_bias, 7 tokens < context_length=9":
        "4 个头，d_in=6，d_out=8，qkv_bias，7 个 token < context_length=9",
    "3 heads, d_in=4 < d_out=12: chunks of 3, 2, 1 tokens with the cache, then no cache":
        "3 个头，d_in=4 < d_out=12：带缓存依次输入 3、2、1 个 token，然后不带缓存",
    "2 heads, d_in=6 > d_out=4, qkv_bias: chunks of 3, 1, 2 tokens with the cache":
        "2 个头，d_in=6 > d_out=4，qkv_bias：带缓存依次输入 3、1、2 个 token",
    "2 heads, d_in=5, d_out=6: prompt of 2 tokens, then one token at a time":
        "2 个头，d_in=5，d_out=6：先输入 2 个 token 的提示，再一次一个 token",
    "a past_key_value the module did not produce (3 cached tokens, 2 new)":
        "不是模块自己产生的 past_key_value（缓存了 3 个 token，新输入 2 个）",
    "two sequences decoded in turns, each with its own cache": "两个序列交替解码，各用各的缓存",
    "4 heads in 2 K/V groups, d_in=6 < d_out=8, 6 tokens < context_length=8":
        "4 个头分成 2 个 K/V 组，d_in=6 < d_out=8，6 个 token < context_length=8",
    "6 heads in 3 K/V groups, d_in=14 > d_out=12, 6 tokens = context_length":
        "6 个头分成 3 个 K/V 组，d_in=14 > d_out=12，6 个 token = context_length",
    "MQA: 4 heads, 1 K/V group, qkv_bias, 5 tokens < context_length=9":
        "MQA：4 个头，1 个 K/V 组，qkv_bias，5 个 token < context_length=9",
    "MHA as GQA: 2 heads, 2 groups, d_in=3, d_out=4": "把 MHA 当作 GQA：2 个头，2 个组，d_in=3，d_out=4",
    "d_model=12, 3 heads, 5 tokens, dropout 0.5": "d_model=12，3 个头，5 个 token，dropout 0.5",
    "d_model=8, 2 heads, 6 tokens, batch 3": "d_model=8，2 个头，6 个 token，batch 3",
    "d_model=8, 4 heads, 7 tokens": "d_model=8，4 个头，7 个 token",
    "3 heads of 4, d_in=4 < d_out=12, base 10000: chunks of 3, 2, 1 tokens with the cache, then the whole sequence "
    "without": "3 个头，每个宽 4，d_in=4 < d_out=12，base 10000：带缓存依次输入 3、2、1 个 token，再不带缓存输入整个序列",
    "2 heads of 4, d_in=10 > d_out=8, qkv_bias, base 100: a prompt of 2, then one token at a time":
        "2 个头，每个宽 4，d_in=10 > d_out=8，qkv_bias，base 100：先输入 2 个 token 的提示，再一次一个 token",
    "4 heads of 6, d_in=6, d_out=24, base 500000: a prompt of 4, then a chunk of 3":
        "4 个头，每个宽 6，d_in=6，d_out=24，base 500000：先输入 4 个 token 的提示，再输入一段 3 个 token",
    "not causal, 5 queries x 11 keys, 2 heads, batch 2, block 4 (does not divide 11)":
        "非因果，5 个查询 × 11 个键，2 个头，batch 2，block 4（不能整除 11）",
    "causal, 13 tokens, 3 heads, batch 2, block 4": "因果，13 个 token，3 个头，batch 2，block 4",
    "causal, 24 tokens, 2 heads, block 5, scores in the hundreds (exp overflows without the running max)":
        "因果，24 个 token，2 个头，block 5，分数上百（不减运行最大值时 exp 会溢出）",
    "not causal, 16 queries x 16 keys, one block of 32": "非因果，16 个查询 × 16 个键，只有一个大小为 32 的 block",
    "3 sequences of 3, 8 and 13 cached tokens, blocks of 4 scattered in reverse, 3 splits":
        "3 条序列，已缓存 3、8、13 个 token，大小为 4 的块在池中倒序分散，切成 3 段",
    "a sequence forked after 6 tokens: parent and child share a half-filled block, 2 splits":
        "一条序列在第 6 个 token 后 fork：父子序列共享一个半满的块，切成 2 段",
    "a sequence rolled back to 5 tokens shares its last block with one of 7 tokens, 2 splits":
        "一条回滚到 5 个 token 的序列与一条 7 个 token 的序列共享最后一个块，切成 2 段",
    "two sequences share a full prompt of 8 tokens and both need a new block, 4 splits":
        "两条序列共享 8 个 token 的完整提示，都需要一个新块，切成 4 段",
    "scores in the hundreds (exp overflows without the maximum), blocks of 3, 3 splits":
        "分数上百（不减最大值时 exp 会溢出），块大小为 3，切成 3 段",
    "2 heads of 4, d_in=6, latent 6, rope_dim 2: a chunk of 3 explicit, then 2 and 1 absorbed, then all 6 without "
    "the cache": "2 个头，每个宽 4，d_in=6，潜在维度 6，rope_dim 2：先显式计算 3 个 token，再用矩阵吸收依次算 2 个和 "
                 "1 个，最后不带缓存算全部 6 个",
    "3 heads of 2, d_in=10 > d_out=6, latent 4, rope_dim 4: a prompt of 2 absorbed, then one token at a time, "
    "explicit then absorbed": "3 个头，每个宽 2，d_in=10 > d_out=6，潜在维度 4，rope_dim 4：先用矩阵吸收算 2 个 token "
                              "的提示，再一次一个 token，先显式、后吸收",
    "4 heads of 4, d_in=8, latent 10, rope_dim 2: 5 tokens absorbed, no cache":
        "4 个头，每个宽 4，d_in=8，潜在维度 10，rope_dim 2：用矩阵吸收算 5 个 token，不带缓存",
    "window 4, no sinks, 2 heads of 4, base 10000: a prefill of 6 (longer than the window), then 1, 1, 2, 1, 1 "
    "tokens (the ring wraps around), then the whole sequence without the cache":
        "窗口 4，没有汇聚点，2 个头，每个宽 4，base 10000：先预填充 6 个 token（比窗口长），再依次输入 1、1、2、1、1 个"
        "（环形缓冲区会绕回），最后不带缓存输入整个序列",
    "window 3, 2 sinks, 3 heads of 2, base 100: a prompt of 3, then one token at a time up to 11":
        "窗口 3，2 个汇聚点，3 个头，每个宽 2，base 100：先输入 3 个 token 的提示，再一次一个 token，直到 11 个",
    "window 5, 1 sink, 2 heads of 6, base 500000: a prefill of 9, then chunks of 3 and 1":
        "窗口 5，1 个汇聚点，2 个头，每个宽 6，base 500000：先预填充 9 个 token，再依次输入 3 个和 1 个",
    "window 1 (only itself), 1 sink, 2 heads of 4: a prompt of 2, then 1, 1, 1":
        "窗口 1（只看自己），1 个汇聚点，2 个头，每个宽 4：先输入 2 个 token 的提示，再依次输入 1、1、1 个",
    "window 16, longer than the sequence (plain causal attention), 2 heads of 4: chunks of 3 and 4":
        "窗口 16，比序列还长（就是普通的因果注意力），2 个头，每个宽 4：依次输入 3 个和 4 个 token",
    "a full ring the module did not produce (window 4, 2 sinks, 13 tokens seen), 2 new tokens":
        "一个不是由该模块产生的满环形缓冲区（窗口 4，2 个汇聚点，已经见过 13 个 token），再输入 2 个新 token",
    "a past_key_value the module did not produce (4 tokens of another prompt, keys rotated), then 2 and 1 new "
    "tokens": "一个不是由该模块产生的 past_key_value（另一段提示的 4 个 token，键已旋转），"
              "再依次输入 2 个和 1 个新 token",
    "a past_key_value the module did not produce (5 tokens of another prompt), then 2 new tokens explicit and 1 "
    "absorbed": "一个不是由该模块产生的 past_key_value（另一段提示的 5 个 token），再显式计算 2 个新 token，"
                "然后用矩阵吸收算 1 个",
    "8 heads of 8, latent 4, rope_dim 2: one token at a time absorbed, after a given past of 40 tokens (the "
    "absorbed path builds no per-head keys or values)": "8 个头，每个宽 8，潜在维度 4，rope_dim 2：在给定的 40 个 "
                                                        "token 的 past 之后，用矩阵吸收一次算一个 token（吸收路径"
                                                        "不构造每个头的键或值）",
    "not causal, 256 queries x 32768 keys, head_dim 8, block 128 (the process's peak memory is measured)":
        "非因果，256 个查询 × 32768 个键，head_dim 8，block 128（测量进程的内存峰值）",
    "the trained checkpoint": "训练好的 checkpoint",
    "heads permuted": "打乱各层中头的顺序",
    "heads permuted, an inert layer in front": "打乱头的顺序，并在最前面插入一个不起作用的层",
    "heads permuted, an inert layer between the two trained layers": "打乱头的顺序，并在两个训练好的层之间插入一个不起作用的层",
    "heads permuted, an inert layer after the trained layers": "打乱头的顺序，并在训练好的层后面插入一个不起作用的层",
    "heads permuted again": "再次打乱头的顺序",
}
CATALOGUE.update({"case:" + en: (en.replace("{", "{{").replace("}", "}}"), zh) for en, zh in CASE_TITLES.items()})


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
    return _fill_zh(zh, values)


_FORMATTER = string.Formatter()


def _fill_zh(template: str, values: dict) -> str:
    """``template.format(**values)``, spacing Chinese and Latin text where a value meets the template: one space
    between a Han character and a Latin letter or digit, none between two Chinese characters or punctuation."""
    out = ""
    for literal, field, spec, conversion in _FORMATTER.parse(template):
        out = _meet(out, literal)
        if field is not None:
            value = values[field]
            if conversion:
                value = _FORMATTER.convert_field(value, conversion)
            out = _meet(out, format(value, spec) if spec or not isinstance(value, str) else value)
    return out


def _han(c: str) -> bool:
    return "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf"


def _wide(c: str) -> bool:  # Han, or full-width punctuation (，：；（）「」“” ...)
    return _han(c) or "\u3000" <= c <= "\u303f" or "\uff00" <= c <= "\uffef" or c in "“”‘’…—"


_LATIN_START = frozenset(string.ascii_letters + string.digits + "_([<√'\"-.")
_LATIN_END = frozenset(string.ascii_letters + string.digits + "_)]>'\"")


def _meet(left: str, right: str) -> str:
    if not left or not right:
        return left + right
    if left[-1] == " " and len(left) > 1 and _wide(left[-2]) and _wide(right[0]):
        return left[:-1] + right
    if right[0] == " " and len(right) > 1 and _wide(left[-1]) and _wide(right[1]):
        return left + right[1:]
    if (_han(left[-1]) and right[0] in _LATIN_START) or (left[-1] in _LATIN_END and _han(right[0])):
        return left + " " + right
    return left + right


# ------------------------------------------------------------------------------------------------------
# what the sandboxed child sent

_MAX_NODES, _MAX_DEPTH, _MAX_TEXT = 200, 6, 4000


def from_child(tree, english):
    """The Msg for a said form (``sandbox/texts.py``) that the child sent along with its English text, when the
    form is well made and says exactly ``english``; else ``english`` itself. The child is not trusted: only its
    own keys, plain strings and bounded sizes are accepted."""
    if tree is None or english is None:
        return english
    try:
        msg = _from_tree(tree, 0, [0])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return english
    return msg if isinstance(msg, Msg) and str.__str__(msg) == english else english


def _from_tree(tree, depth, count):
    count[0] += 1
    if count[0] > _MAX_NODES or depth > _MAX_DEPTH:
        raise ValueError("too large")
    if isinstance(tree, str):
        return tree[:_MAX_TEXT]
    if not isinstance(tree, dict) or set(tree) != {"key", "args"}:
        raise ValueError("not a said form")
    key, args = tree["key"], tree["args"]
    if not isinstance(key, str) or not (key in child.TEXTS or key in JOINS) or not isinstance(args, dict):
        raise ValueError("unknown key")
    clean = {}
    for name, value in list(args.items())[:12]:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError("bad argument name")
        if isinstance(value, list) and key in JOINS and name == "items":
            clean[name] = [_from_tree(v, depth + 1, count) for v in value[:64]]
        else:
            clean[name] = _from_tree(value, depth + 1, count)
    return Msg(key, **clean)
