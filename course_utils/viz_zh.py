"""Chinese labels for the course's figures: the Chinese notebooks run the English notebooks' code, and
``course_utils.viz`` translates each figure text as it is set (titles, axis labels, legends, annotations).

``LABELS`` maps a whole English text to its Chinese; ``PATTERNS`` translate texts made by f-strings. A text found in
neither (a token, a number, a model name) stays as it is.
"""

from __future__ import annotations

import re

LABELS = {
    # 01
    "weights without trainable projections": "没有可训练投影时的权重",
    "variance of the scores": "分数的方差",
    "uniform (1/16)": "均匀分布（1/16）",
    "mean largest weight": "最大权重的平均值",
    "unscaled scores grow with d_k and saturate softmax": "不缩放时分数随 d_k 增大，softmax 饱和",
    "attention weight": "注意力权重",
    "all queries": "所有查询",
    "mean largest weight of softmax": "softmax 最大权重的平均值",
    # 02
    "causal mask (dark = hidden)": "因果掩码（深色 = 被遮住）",
    "causal attention weights": "因果注意力权重",
    "mask (dark = hidden)": "掩码（深色 = 被遮住）",
    "attention weights": "注意力权重",
    # 03
    "four heads, same tokens, different weights": "四个头：同样的 token，不同的权重",
    "wrapper (loop over heads)": "包装器（逐头循环）",
    "one batched matmul": "一次批量矩阵乘法",
    "number of heads (head size 16)": "头数（每头维度 16）",
    "time per forward [ms]": "每次前向的时间 [ms]",
    # 04
    "projection (T, d_out): column numbers": "投影 (T, d_out)：列号",
    "after .view(B, T, nh, hs).transpose(1, 2): (nh, T, hs)": ".view(B, T, nh, hs).transpose(1, 2) 之后：(nh, T, hs)",
    "4 heads, one sentence": "4 个头，同一句话",
    # 05
    "3 new queries, 4 cached + 3 new keys (green = may attend)": "3 个新查询，4 个缓存的键 + 3 个新键（绿色 = 可以关注）",
    "no cache: recompute the prefix": "不用缓存：重算整个前缀",
    "KV cache: one new token": "KV cache：只算一个新 token",
    "tokens already generated": "已生成的 token 数",
    "ms per new token": "每个新 token 的毫秒数",
    "time per new token (4 layers, d_model=128)": "每个新 token 的耗时（4 层，d_model=128）",
    "is_causal=True (top-left): WRONG": "is_causal=True（左上对齐）：错误",
    "~causal_mask (bottom-right): RIGHT": "~causal_mask（右下对齐）：正确",
    "cached | new": "缓存 | 新",
    "key dimension": "键的维度",
    "token": "词元（token）",
    "key value": "键的取值",
    # 06
    "K/V head read by each query head (8 query heads, 2 K/V heads)": "每个查询头读取的 K/V 头（8 个查询头，2 个 K/V 头）",
    "KV cache (MiB)": "KV 缓存（MiB）",
    "K/V heads after mean-pooling 8 heads": "8 个头做平均池化后的 K/V 头数",
    "relative output error": "输出的相对误差",
    "MHA -> GQA by mean-pooling, before uptraining": "MHA -> GQA（平均池化，继续训练之前）",
    "query head": "查询头",
    "expansion": "扩展方式",
    "repeat_kv (expand)": "repeat_kv（expand 扩展）",
    ".repeat (tiling)": ".repeat（平铺）",
    "your model": "你的模型",
    "published models": "公开的模型",
    "random heads": "随机的头",
    "similar heads": "相似的头",
    # 07
    "forward": "前向",
    "forward + backward": "前向 + 反向",
    "sequence length (tokens so far)": "序列长度（已有 token 数）",
    "time per token vs sequence length": "每个 token 的耗时与序列长度",
    "tokens / s": "token / 秒",
    "no cache": "不用缓存",
    "growing cache": "逐步增长的缓存",
    "preallocated cache": "预分配的缓存",
    "loop over heads (03)": "逐头循环（03）",
    "reference: explicit softmax (04)": "参考实现：显式 softmax（04）",
    "one fused QKV projection": "一次融合的 QKV 投影",
    "bare SDPA, is_causal": "单独调用 SDPA，is_causal",
    "bare SDPA, boolean mask": "单独调用 SDPA，布尔掩码",
    "nn.MultiheadAttention, no weights": "nn.MultiheadAttention，不返回权重",
    "our module with SDPA": "我们的模块（用 SDPA）",
    "the course's module": "本课程的模块",
    "one bare SDPA call": "单独一次 SDPA 调用",
    "other paths": "其他实现",
    # 08
    "pair i (frequency base^(-2i/d))": "维度对 i（频率 base^(-2i/d)）",
    "position m": "位置 m",
    "distance m - n": "距离 m - n",
    "score / head_dim": "分数 / head_dim",
    "all-ones query and key: score vs distance": "全 1 的查询和键：分数随距离的变化",
    "decoded token": "解码的 token",
    "max |output - full pass|": "max |输出 - 完整计算|",
    "RoPE with a KV cache: three mistakes, token by token": "RoPE 配合 KV cache：三种错误，逐 token 比较",
    # 09
    "key position": "键的位置",
    "query position": "查询的位置",
    "one (B, h, T, T) float32": "一个 (B, h, T, T) 的 float32 张量",
    "sequence length T": "序列长度 T",
    "peak tensor memory (MiB)": "张量内存峰值（MiB）",
    "attention peak memory: quadratic vs linear in T": "注意力的内存峰值：随 T 平方增长 vs 线性增长",
    "naive (scores materialised)": "朴素实现（存下整个分数矩阵）",
    "tiled, block 64": "分块，块大小 64",
    "computed, no mask": "计算，不需遮挡",
    "computed, masked inside": "计算，块内遮挡",
    "skipped (all hidden)": "跳过（全被遮住）",
    "T: the last tiles end past it": "T：最后一行/列分块在此截断",
    # 10
    "KV cache (MiB, log scale)": "KV 缓存（MiB，对数刻度）",
    "KV cache (MiB, log scale: each step right is 10x more)": "KV 缓存（MiB，对数刻度：向右每一格多 10 倍）",
    "KV cache per sequence, 4096 tokens, bfloat16": "每个序列的 KV 缓存：4096 个 token，bfloat16",
    "DeepSeek-V3 as MHA": "DeepSeek-V3（若用 MHA）",
    # 11
    "loss on the second copy": "第二遍上的损失",
    "accuracy on the second copy": "第二遍上的准确率",
    "phase change": "相变",
    "training step": "训练步数",
    "previous-token score": "前一词元分数",
    "induction score": "归纳分数",
    "head (bold: the largest score of each row)": "头（粗体：每行最大的分数）",
    "layer": "层",
    "queries below: the second copy": "线以下的查询：第二遍",
    "keys between: the first copy": "两线之间的键：第一遍",
    "no ablation": "不消融",
    "accuracy, second copy": "准确率（第二遍）",
    "zero one head (red: previous-token and induction head)": "把一个头置零（红色：前一词元头和归纳头）",
    "uptraining step": "继续训练的步数",
    "uptraining after mean-pooling the K/V heads": "K/V 头平均池化后的继续训练",
    # 12
    "pair i": "维度对 i",
    "θ_i / scaled θ_i": "θ_i / 缩放后的 θ_i",
    "how much each pair is slowed (s = 4)": "每个维度对被放慢了多少（s = 4）",
    "no scaling": "不缩放",
    "linear (PI)": "线性（位置插值）",
    "Llama 3.1 rule": "Llama 3.1 的规则",
    "all-ones query and key, short distances": "全 1 的查询和键，短距离",
    "pair 46: first wavelength > L": "维度对 46：第一个波长 > L 的维度对",
    "NTK-aware": "NTK-aware 缩放",
    # course_utils.viz
    "key": "键（key）",
    "key (bold: the largest weight of each row)": "键（key；粗体：每行最大的权重）",
    "query": "查询（query）",
    # 13
    "physical block in the pool": "池中的物理块",
    "physical block in the pool (coloured: held by the sequence named above it)": "池中的物理块（着色：被上方标注的序列占用）",
    "slots filled": "已写入的槽位",
    "preallocated: 2048 slots per request": "预分配：每个请求 2048 个槽位",
    "paged: whole blocks of 16": "分页：整块分配，每块 16 个槽位",
    "tokens stored": "实际存储的 token",
    "request (sorted by length)": "请求（按长度排序）",
    "token slots": "token 槽位数",
    "what each request holds: preallocated vs paged": "每个请求占用的槽位：预分配 vs 分页",
    # 14
    "key block (inner loop, in order)": "键块（内层循环，按顺序）",
    "query block = program id 0": "查询块 = 程序 id 0",
    "program 4's row": "程序 4 这一行",
    "never loaded": "从不加载",
    "loaded whole": "整块加载，不用掩码",
    "masked: diagonal": "加掩码：对角线",
    "masked: tail past T": "加掩码：超出 T 的尾部",
    # 15
    "rank (keeps its query chunk)": "rank（保留自己的查询块）",
    "ring step": "环上的第几步",
    "rank": "rank 编号",
    "K/V chunk each rank holds": "每个 rank 手里的 K/V 块",
    "owner of the K/V chunk": "K/V 块来自哪个 rank",
    "visible query-key pairs": "可见的查询-键对数",
    "rank computing the pair": "计算这一对的 rank",
    "ranks W": "rank 数 W",
    "MiB sent per rank per layer": "每个 rank 每层发送的 MiB",
    "128k tokens": "128k 个 token",
    "ring": "环形注意力",
    "allgather": "全收集",
    "ulysses": "Ulysses（按头切分）",
    "Llama-3.1-70B heads (64 q, 8 kv)": "Llama-3.1-70B 的头（64 个 q，8 个 kv）",
    "MHA (32 q, 32 kv)": "MHA（32 个 q，32 个 kv）",
    # 16
    "linear attention: S += v kᵀ": "线性注意力：S += v kᵀ",
    "delta rule, one pass": "delta 规则，写一遍",
    "delta rule, 20 passes": "delta 规则，写 20 遍",
    "pairs written into a 16 x 16 state (N)": "写进 16 x 16 状态的键值对数（N）",
    "mean relative recall error": "平均相对回忆误差",
    "what a fixed state can recall": "固定的状态能记住多少",
    "full attention in every layer": "每层都是完整注意力",
    "hybrid: caches + states": "混合模型：缓存 + 状态",
    "hybrid: the linear layers' states": "混合模型：线性层的状态",
    "context (tokens)": "上下文（token 数）",
    "GiB per sequence": "每条序列的 GiB",
    "two Gated DeltaNet layers": "两层门控 DeltaNet",
    "Gated DeltaNet + attention": "门控 DeltaNet + 注意力",
    "guessing (1/64)": "随机猜（1/64）",
    "key-value pairs in the sequence": "序列中的键值对数",
    "queries answered right": "答对的查询比例",
    "associative recall: 2 heads of 8 x 8 state per linear layer": "联想回忆：每个线性层 2 个头，每头 8 x 8 的状态",
    # 17
    "indexer warm-up loss": "索引器预热的损失",
    "recall of the dense top-4": "对稠密注意力前 4 个键的召回率",
    "keys the indexer keeps": "索引器留下的键",
    "bits per number": "每个数的比特数",
    "error of a decoding step's output": "一步解码输出的误差",
    "KIVI (keys per channel, window 32)": "KIVI（键逐通道，窗口 32）",
    "keys per channel, no window": "键逐通道，无窗口",
    "keys per token": "键逐 token",
    "bytes per token and K/V head": "每个 token、每个 K/V 头的字节数",
    "bytes a token costs: head_dim 128, groups of 32": "一个 token 的字节数：head_dim 128，每组 32",
    "share of layer 1's attention (p)": "第 1 层注意力的占比（p）",
    "KL(p || softmax(I))": "KL 散度 KL(p || softmax(I))",
    "float16": "float16（半精度）",
}

PATTERNS = [
    (re.compile(p), r)
    for p, r in (
        (r"^(\w+): ring time (\d+)$", r"\1：环的总时间 \2"),
        (r"^(\w+), step (\d+)$", r"\1，第 \2 步"),
        (r"^query '(.*)', τ = (\S+)$", r"查询 '\1'，τ = \2"),
        (r"^cost of the Python loop \((\w+)\)$", r"Python 循环的开销（\1）"),
        (r"^(\d+) head\(s\)$", r"\1 个头"),
        (r"^head (\d+)$", r"头 \1"),
        (r"^layer (\d+)$", r"第 \1 层"),
        (r"^cached keys, head 0 \((\d+) of (\d+) tokens\)$", r"缓存的键，头 0（\2 个 token 中的 \1 个）"),
        (r'^"(.*)" attends to the cache$', r'"\1" 关注缓存'),
        (r"^cache for (\d+) tokens$", r"\1 个 token 的缓存"),
        (r"^decoding (\d+) tokens$", r"解码 \1 个 token"),
        (r"^(\d+) kv heads$", r"\1 个 KV 头"),
        (r"^([\d,]+) tokens x batch (\d+), (\w+)$", r"\1 个 token × batch \2，\3"),
        (
            r"^(milliseconds, lower|attention GFLOP/s, higher|speed-up vs the reference path, higher) is better \((.*), (\d+) threads\)$",
            lambda m: (
                {
                    "milliseconds, lower": "毫秒，越低越好",
                    "attention GFLOP/s, higher": "注意力 GFLOP/s，越高越好",
                    "speed-up vs the reference path, higher": "相对参考实现的加速比，越高越好",
                }[m.group(1)]
                + f"（{m.group(2)}，{m.group(3)} 个线程）"
            ),
        ),
        (r"^cos\(m θ_i\), head_dim=(.*)$", r"cos(m θ_i)，head_dim=\1"),
        (r"^base (\S+)$", r"基数 base = \1"),
        (
            r"^window (\d+), (\d+) sink\(s\): query (\d+) sees (\d+) keys$",
            r"窗口 \1，\2 个汇聚点：查询 \3 看到 \4 个键",
        ),
        (r"^(\d+) of (\d+) tiles computed$", r"已计算 \1 / \2 个分块"),
        (r"^  ([\d,.]+) MiB \(smallest\)$", r"  \1 MiB（最小）"),
        (r"^  ([\d,.]+) MiB \(([\d,.]+)x the smallest\)$", r"  \1 MiB（最小者的 \2 倍）"),
        (r"^([\d,]+) tokens x batch (\d+), (\w+)$", r"\1 个 token × 批大小 \2，\3"),
        (r"^your (MHA|GQA|MQA|MLA)$", r"你的 \1"),
        (r"^(forward|forward \+ backward): (.*)$", lambda m: f"{LABELS[m.group(1)]}：{m.group(2)}"),
        (
            r"^layer (\d+), head (\d+)(?: \((previous-token head|induction head)\))?\n(.*)$",
            lambda m: (
                f"第 {m.group(1)} 层，头 {m.group(2)}"
                + {"previous-token head": "（前一词元头）", "induction head": "（归纳头）", None: ""}[m.group(3)]
                + "\n"
                + re.sub(r"^prev (\S+), induction (\S+)$", r"前一词元分数 \1，归纳分数 \2", m.group(4))
            ),
        ),
        (r"^step (\d+): block tables (.*)$", r"第 \1 步：块表 \2"),
        (r"^(\S+): (\d+) linear \+ (\d+) full-attention layers$", r"\1：\2 层线性 + \3 层完整注意力"),
        (r"^delta rule, β = (\S+), (\d+) pass\(es\)$", r"delta 规则，β = \1，写 \2 遍"),
        (
            r"^(warmed-up|untrained) indexer, top-(\d+): red frames = the keys it keeps$",
            lambda m: (
                {"warmed-up": "预热过的", "untrained": "未训练的"}[m.group(1)]
                + f"索引器，前 {m.group(2)} 个：红框 = 它留下的键"
            ),
        ),
        (r"^full attention: tiles visited, T=(\d+), blocks of (\d+)$", r"完整注意力：访问的分块，T=\1，块大小 \2"),
        (r"^causal: tiles visited, T=(\d+), blocks of (\d+)$", r"因果：访问的分块，T=\1，块大小 \2"),
        (
            r"^(zero|mean|resample) ablation$",
            lambda m: {"zero": "零消融", "mean": "均值消融", "resample": "重采样消融"}[m.group(1)],
        ),
        (
            r"^remove one head \(previous-token head: L(\d+)H(\d+), induction head: L(\d+)H(\d+)\)$",
            r"移除一个头（前一词元头：L\1H\2，归纳头：L\3H\4）",
        ),
    )
]


def translate(text):
    """The Chinese for figure text ``text``, or ``text`` itself when there is none."""
    if not isinstance(text, str) or not text:
        return text
    if text in LABELS:
        return LABELS[text]
    for pattern, replacement in PATTERNS:
        if pattern.match(text):
            return pattern.sub(replacement, text, count=1)
    return text
