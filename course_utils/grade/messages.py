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
    "not_implemented.answers": ("not implemented yet: {answers}", "还没有作答：{answers}"),

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
    "compare.nan": ("{label} contains NaN", "{label}中出现了 NaN"),
    "compare.differs": ("{label} differs from the reference (max abs difference {diff:.3g})",
                        "{label}与参考实现不一致（最大绝对误差 {diff:.3g}）"),

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
    "refusal.interview_call": ("uses {call}, which interview mode does not allow", "用了 {call}，面试模式不允许这样做"),
    "refusal.imports": ("imports {what}", "导入了 {what}"),
    "refusal.imports_cell": ("imports cell {cell}: {what}", "单元格 {cell} 导入了 {what}"),
    "refusal.uses": ("uses {what}", "用了 {what}"),
    "refusal.uses_cell": ("uses cell {cell}: {what}", "单元格 {cell} 用了 {what}"),
    "refusal.course_scoring": ("calls {call}, the course's own scoring", "调用了课程自带的打分函数 {call}"),
    "refused.forbidden": ("no credit: interview mode (手撕MHA) asks for the computation by hand, without "
                          "F.scaled_dot_product_attention, nn.MultiheadAttention or course_utils: {first}",
                          "不得分：面试模式（手撕MHA）要求亲手写出计算过程，不能用 F.scaled_dot_product_attention、"
                          "nn.MultiheadAttention 或 course_utils：{first}"),
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
    "mutant.scores_materialised": ("the outputs are right, but the full (n_q, n_k) score matrix is built: compute one "
                                   "(block, block) tile of scores at a time",
                                   "输出是对的，但构造了完整的 (n_q, n_k) 分数矩阵：应当一次只算一个 (block, block) 的分数分块"),
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
    "q.grows_with_context": ("during decoding, which grows with the context length: 'queries', 'keys and values' or "
                             "'weights'?",
                             "解码时，哪一项随上下文长度增长：'queries'、'keys and values' 还是 'weights'？"),
    "q.grows_with_context.queries": ("only the new token's query is needed at each step: that is why the cache holds "
                                     "no Q",
                                     "每一步只需要新 token 的查询：这正是缓存里不存 Q 的原因"),
    "q.grows_with_context.weights": ("the parameters are fixed; what grows is the cache of keys and values",
                                     "参数是固定的；随上下文增长的是键和值的缓存"),
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
    "batch.passed": ("## {exercise}: passed ({passed}/{total} checks, score {score:g})",
                     "## {exercise}：通过（{total} 项检查通过了 {passed} 项，得分 {score:g}）"),
    "batch.not_passed": ("## {exercise}: not passed ({passed}/{total} checks, score {score:g})",
                         "## {exercise}：未通过（{total} 项检查通过了 {passed} 项，得分 {score:g}）"),
    "batch.problems": ("## Problems while running your code", "## 运行你的代码时出现的问题"),
    "batch.status_passed": ("passed", "通过"),
    "batch.status": ("{exercise}: {diagnosis}", "{exercise}：{diagnosis}"),
    "batch.grader_failed": ("the grader failed on this submission ({type}: {error}); please report it",
                            "评分器在这份提交上出错了（{type}：{error}）；请报告这个问题"),
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
    "cli.graded": ("graded {count} submissions ({passed} passed everything): {out}/grades.csv",
                   "评完了 {count} 份提交（{passed} 份全部通过）：{out}/grades.csv"),
    "cli.grader_failed_on": ("error: the grader failed on {names}", "错误：评分器在这些提交上出错了：{names}"),
    "cli.need_path": ("give a PATH to grade, or --batch DIR", "请给出要评分的 PATH，或者用 --batch DIR"),
    "cli.grader_failed": ("error: the grader failed: {type}: {error}", "错误：评分器出错了：{type}：{error}"),
    "cli.not_graded": ("❌ {error}", "❌ 未评分：{error}"),
    "cli.note": ("   note: {note}", "   注：{note}"),
}

# the sandboxed child's own texts: their English is in sandbox/texts.py, their Chinese here
CHILD_ZH = {
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

# the cases' names (specs, specs_beyond, specs_capstone), shown in "case '...'": the English name is the key
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
    "2 heads of 4, d_in=6, latent 6, rope_dim 2: a chunk of 3 explicit, then 2 and 1 absorbed, then all 6 without "
    "the cache": "2 个头，每个宽 4，d_in=6，潜在维度 6，rope_dim 2：先显式计算 3 个 token，再用矩阵吸收依次算 2 个和 "
                 "1 个，最后不带缓存算全部 6 个",
    "3 heads of 2, d_in=10 > d_out=6, latent 4, rope_dim 4: a prompt of 2 absorbed, then one token at a time, "
    "explicit then absorbed": "3 个头，每个宽 2，d_in=10 > d_out=6，潜在维度 4，rope_dim 4：先用矩阵吸收算 2 个 token "
                              "的提示，再一次一个 token，先显式、后吸收",
    "4 heads of 4, d_in=8, latent 10, rope_dim 2: 5 tokens absorbed, no cache":
        "4 个头，每个宽 4，d_in=8，潜在维度 10，rope_dim 2：用矩阵吸收算 5 个 token，不带缓存",
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
