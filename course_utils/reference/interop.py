"""Weight mappings between the course's modules and PyTorch's built-ins (parameters only, never buffers)."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from ..lang import pick
from ._checks import check_divisible
from .attention import MultiHeadAttentionWrapper
from .multihead import GroupedQueryAttention, MultiHeadAttention


def to_nn_multihead(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` (batch_first) computing the same function as ``mha``.

    Call it with ``attn_mask=causal_mask(T)``: nn.MultiheadAttention reads True = hidden, as this package does.
    With ``d_in == d_out`` pass ``x`` as query, key and value. With ``d_in != d_out``,
    nn.MultiheadAttention needs a query already ``d_out`` wide: its query projection is the identity
    and the query to pass is ``mha.W_query(x)``; keys and values are ``x`` (``kdim = vdim = d_in``).
    For cross-attention (``causal=False``) keys and values are the context (``kdim = vdim = d_context``).
    """
    if mha.num_kv_groups != mha.num_heads:
        raise ValueError(
            pick(
                "nn.MultiheadAttention has no grouped K/V heads: map a MultiHeadAttention",
                "nn.MultiheadAttention 没有分组的 K/V 头：请映射一个 MultiHeadAttention",
            )
        )
    if mha.rope:
        raise ValueError(
            pick(
                "nn.MultiheadAttention has no rotary position embedding: map a module built with rope=False",
                "nn.MultiheadAttention 没有旋转位置编码：请映射一个用 rope=False 构造的模块",
            )
        )
    same = mha.d_in == mha.d_out == mha.d_context
    p = mha.W_query.weight
    torch_mha = nn.MultiheadAttention(
        mha.d_out,
        mha.num_heads,
        dropout=mha.dropout.p,
        bias=True,
        batch_first=True,
        kdim=None if same else mha.d_context,
        vdim=None if same else mha.d_context,
        device=p.device,
        dtype=p.dtype,
    )

    def bias_of(linear):
        if linear.bias is not None:
            return linear.bias
        return torch.zeros(linear.out_features, dtype=p.dtype, device=p.device)

    with torch.no_grad():
        if same:
            torch_mha.in_proj_weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]))
            torch_mha.in_proj_bias.copy_(torch.cat([bias_of(mha.W_query), bias_of(mha.W_key), bias_of(mha.W_value)]))
        else:
            torch_mha.q_proj_weight.copy_(torch.eye(mha.d_out, dtype=p.dtype, device=p.device))
            torch_mha.k_proj_weight.copy_(mha.W_key.weight)
            torch_mha.v_proj_weight.copy_(mha.W_value.weight)
            torch_mha.in_proj_bias.copy_(
                torch.cat([torch.zeros_like(bias_of(mha.W_query)), bias_of(mha.W_key), bias_of(mha.W_value)])
            )
        torch_mha.out_proj.weight.copy_(mha.out_proj.weight)
        torch_mha.out_proj.bias.copy_(mha.out_proj.bias)
    return torch_mha


def wrapper_to_mha(wrapper: MultiHeadAttentionWrapper) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` equal to ``wrapper``: head weights stacked, ``out_proj`` = identity.

    Each wrapper head has width ``d_head``; the result has ``d_out = num_heads * d_head``.
    """
    heads = list(wrapper.heads)
    first = heads[0]
    num_heads, d_head = len(heads), first.d_out
    w = first.W_query.weight
    mha = MultiHeadAttention(
        first.d_in,
        num_heads * d_head,
        first.context_length,
        first.dropout.p,
        num_heads,
        qkv_bias=first.W_query.bias is not None,
    ).to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            target = getattr(mha, name)
            target.weight.copy_(torch.cat([getattr(h, name).weight for h in heads]))
            if target.bias is not None:
                target.bias.copy_(torch.cat([getattr(h, name).bias for h in heads]))
        mha.out_proj.weight.copy_(torch.eye(mha.d_out, dtype=w.dtype, device=w.device))
        mha.out_proj.bias.zero_()
    return mha


def copy_parameters(src: nn.Module, dst: nn.Module) -> nn.Module:
    """Copy ``src``'s parameters into ``dst`` by name and return ``dst``.

    Parameters only: buffers such as a causal mask are rebuilt by each module's constructor, and an old
    checkpoint's mask buffer may even use another convention. Names and shapes must match exactly.
    """
    src_params, dst_params = dict(src.named_parameters()), dict(dst.named_parameters())
    if src_params.keys() != dst_params.keys():
        raise ValueError(
            pick(
                f"parameter names differ: only in source {sorted(src_params.keys() - dst_params.keys())}, "
                f"only in target {sorted(dst_params.keys() - src_params.keys())}",
                f"参数名不一致：只在源模块里有 {sorted(src_params.keys() - dst_params.keys())}，"
                f"只在目标模块里有 {sorted(dst_params.keys() - src_params.keys())}",
            )
        )
    for name, p in src_params.items():
        if p.shape != dst_params[name].shape:
            raise ValueError(
                pick(
                    f"{name}: source shape {tuple(p.shape)} != target shape {tuple(dst_params[name].shape)}",
                    f"{name}：源模块的形状 {tuple(p.shape)} != 目标模块的形状 {tuple(dst_params[name].shape)}",
                )
            )
    with torch.no_grad():
        for name, p in src_params.items():
            dst_params[name].copy_(p)
    return dst


def constructor_options(attn: GroupedQueryAttention) -> dict:
    """Every argument of ``GroupedQueryAttention(...)``, read back from ``attn``, so that
    ``GroupedQueryAttention(**constructor_options(attn))`` builds the same module with fresh parameters.

    The signature is introspected, so an option added to the constructor later is copied too; one that the module
    does not store under its own name (and is not derived below) raises here instead of being dropped silently.
    """
    derived = {"dropout": attn.dropout.p, "qkv_bias": attn.W_key.bias is not None}
    names = [n for n in inspect.signature(GroupedQueryAttention.__init__).parameters if n != "self"]
    missing = [n for n in names if n not in derived and not hasattr(attn, n)]
    if missing:
        raise ValueError(
            pick(
                f"GroupedQueryAttention does not store the constructor option(s) {missing}: store them "
                "under their own names (or derive them in constructor_options) so that copies keep them",
                f"GroupedQueryAttention 没有保存构造参数 {missing}：请以它们自己的名字保存"
                "（或在 constructor_options 里推导出来），这样拷贝出的模块才能保留它们",
            )
        )
    return {n: derived[n] if n in derived else getattr(attn, n) for n in names}


def mha_to_gqa(attn: GroupedQueryAttention, num_kv_groups: int) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention`` with ``num_kv_groups`` K/V heads, each the mean of the K/V heads it replaces
    (Ainslie et al. 2023's mean-pooling; notebook 06 derives it). Queries and ``out_proj`` are copied unchanged.

    ``attn`` may be MHA or GQA with a multiple of ``num_kv_groups`` K/V heads; query head ``h`` keeps reading
    the group that contains its old K/V head (``repeat_interleave`` convention), so ``num_kv_groups`` equal to
    ``attn.num_kv_groups`` reproduces ``attn`` exactly.
    """
    old = attn.num_kv_groups
    check_divisible(old, num_kv_groups, f"the K/V heads ({old}) and num_kv_groups ({num_kv_groups})")
    check_divisible(attn.num_heads, num_kv_groups, f"num_heads ({attn.num_heads}) and num_kv_groups ({num_kv_groups})")
    w = attn.W_query.weight
    options = constructor_options(attn) | {"num_kv_groups": num_kv_groups}
    gqa = GroupedQueryAttention(**options).to(device=w.device, dtype=w.dtype)
    pool, hd = old // num_kv_groups, attn.head_dim
    with torch.no_grad():
        for name in ("W_query", "out_proj"):
            getattr(gqa, name).load_state_dict(getattr(attn, name).state_dict())
        for name in ("W_key", "W_value"):
            src, dst = getattr(attn, name), getattr(gqa, name)
            # rows are heads: (old*hd, d) -> (new, pool, hd, d), averaged over the `pool` heads of each group
            dst.weight.copy_(src.weight.view(num_kv_groups, pool, hd, -1).mean(dim=1).reshape(num_kv_groups * hd, -1))
            if src.bias is not None:
                dst.bias.copy_(src.bias.view(num_kv_groups, pool, hd).mean(dim=1).reshape(-1))
    gqa.train(attn.training)
    return gqa
