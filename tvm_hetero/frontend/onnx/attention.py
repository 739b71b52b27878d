"""ONNX's Attention op (opset 23-25: scaled dot-product attention), which TVM 0.27's importer
mistakes for onnxruntime's contrib ``Attention`` (it asks for ``num_heads`` and fails).

The converter follows the spec (and the onnx reference implementation, whose outputs the node
cases hold) in Relax ops: 3-D inputs split into heads, the key/value cache concatenated
(``present_key``/``present_value``), grouped-query heads repeated, ``Q * sqrt(scale)`` times
``K^T * sqrt(scale)``, the soft cap, one additive bias built from ``attn_mask`` (boolean or
float, padded to the keys), ``is_causal`` (bottom-right aligned: the offset is the cache
length, or per batch ``nonpad_kv_seqlen - q_len``), the sliding window and the padding of
``nonpad_kv_seqlen``; softmax at ``softmax_precision``; a query row that may attend no key
gives zeros, not NaN; and the ``qk_matmul_output`` of each mode. The onnxruntime contrib op
(which has ``num_heads``) still goes to TVM's converter.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from .index_guard import static_dims
from .registry import fix, node_name

_ONNX_FLOAT_TYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


@fix("Attention")
def _attention(importer, inputs, attrs, opset):
    from tvm import relax

    if "num_heads" in attrs:  # com.microsoft's Attention: TVM's own converter
        return None
    bb = importer.bb
    what = f"Attention (node {node_name(attrs)})"
    q, k, v, mask, past_k, past_v, nonpad = (inputs[i] for i in range(7))
    if (past_k is None) != (past_v is None):
        raise ModelError(f"{what}: past_key and past_value go together")
    dtype = str(q.ty.dtype)
    rank = len(static_dims(q, what))
    if rank == 3:
        if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
            raise ModelError(f"{what}: 3-D inputs need q_num_heads and kv_num_heads")
        q, k, v = (_split_heads(bb, t, int(attrs[key]), what)
                   for t, key in ((q, "q_num_heads"), (k, "kv_num_heads"),
                                  (v, "kv_num_heads")))
    elif rank != 4:
        raise ModelError(f"{what}: Q has rank {rank}; Attention takes 3-D or 4-D inputs")
    batch, q_heads, q_len, head_size = static_dims(q, what)
    past_len = 0
    if past_k is not None:
        past_len = static_dims(past_k, what)[2]
        k = bb.normalize(relax.op.concat([past_k, k], axis=2))
        v = bb.normalize(relax.op.concat([past_v, v], axis=2))
    present_k, present_v = k, v
    io_dtype = dtype
    if dtype in ("float16", "bfloat16"):  # computed in float32 (as onnxruntime does)
        dtype = "float32"
        q, k, v = (bb.normalize(relax.op.astype(t, dtype)) for t in (q, k, v))
        if mask is not None and str(mask.ty.dtype) != "bool":
            mask = bb.normalize(relax.op.astype(mask, dtype))
    kv_heads, kv_len = static_dims(k, what)[1:3]
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            raise ModelError(f"{what}: {q_heads} query heads are not a multiple of "
                             f"{kv_heads} key/value heads")
        k = relax.op.repeat(k, q_heads // kv_heads, axis=1)  # [h0, h0, h1, h1, ...]
        v = relax.op.repeat(v, q_heads // kv_heads, axis=1)

    def const(value, of=dtype):
        return relax.const(np.asarray(value, dtype=of), of)

    scale = float(attrs["scale"]) if "scale" in attrs else 1.0 / float(np.sqrt(head_size))
    root = const(np.sqrt(np.float32(scale)).astype(np.float32).item())
    qk = bb.normalize(relax.op.matmul(q * root, relax.op.permute_dims(k, [0, 1, 3, 2]) * root))
    softcap = float(attrs.get("softcap", 0.0))
    if softcap > 0:
        qk = bb.normalize(const(softcap) * relax.op.tanh(qk / const(softcap)))
    bias = _bias(bb, attrs, mask, nonpad, dtype, batch, q_len, kv_len, past_len, past_k, what)
    scores = qk if bias is None else bb.normalize(qk + bias)
    mode = int(attrs.get("qk_matmul_output_mode", 0))
    qk_output = scores if mode == 2 else qk

    precision = attrs.get("softmax_precision")
    soft_dtype = _ONNX_FLOAT_TYPES.get(int(precision), None) if precision is not None \
        else dtype
    if soft_dtype is None:
        raise ModelError(f"{what}: softmax_precision {precision} is not a float type")
    logits = scores if soft_dtype == dtype else relax.op.astype(scores, soft_dtype)
    probs = relax.op.nn.softmax(logits, axis=-1)
    if bias is not None:  # a row that may attend no key: zeros (its softmax is NaN)
        # TVM's max starts from the lowest finite value: a row of -inf gives that, not -inf
        masked_row = relax.op.less_equal(relax.op.max(bias, axis=-1, keepdims=True),
                                         const(_lowest(dtype)))
        probs = relax.op.where(masked_row, const(0.0, soft_dtype), probs)
    probs = bb.normalize(probs if soft_dtype == dtype else relax.op.astype(probs, dtype))
    if mode == 3:
        qk_output = probs
    elif mode not in (0, 1, 2):
        raise ModelError(f"{what}: qk_matmul_output_mode {mode} is not 0-3")
    y = bb.normalize(relax.op.matmul(probs, v))
    if rank == 3:
        y = relax.op.reshape(bb.normalize(relax.op.permute_dims(y, [0, 2, 1, 3])),
                             [batch, q_len, -1])
    if io_dtype != dtype:
        y, qk_output = (relax.op.astype(t, io_dtype) for t in (y, qk_output))
    results = [bb.normalize(y), present_k, present_v, bb.normalize(qk_output)]
    count = attrs["tvm_custom"]["num_outputs"]
    return results[0] if count == 1 else relax.Tuple(results[:count])


def _lowest(dtype: str) -> float:
    """The lowest finite value of a float type."""
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype).min)


def _split_heads(bb, tensor, heads: int, what: str):
    """[batch, seq, heads * size] -> [batch, heads, seq, size]."""
    from tvm import relax

    batch, seq, hidden = static_dims(tensor, what)
    if hidden % heads:
        raise ModelError(f"{what}: hidden size {hidden} is not a multiple of {heads} heads")
    return bb.normalize(relax.op.permute_dims(
        relax.op.reshape(tensor, [batch, seq, heads, hidden // heads]), [0, 2, 1, 3]))


def _bias(bb, attrs, mask, nonpad, dtype, batch, q_len, kv_len, past_len, past_k, what):
    """The additive bias (0 where a query may attend a key, -inf elsewhere, plus a float
    mask), broadcastable to [batch, heads, q_len, kv_len]; None when nothing masks."""
    from tvm import relax

    def const(value, of=dtype):
        return relax.const(np.asarray(value, dtype=of), of)

    neg_inf = const(-np.inf)
    bias = None
    if mask is not None:
        dims = static_dims(mask, what)
        is_bool = str(mask.ty.dtype) == "bool"
        if dims[-1] < kv_len:  # padded with "may not attend"
            pad_dims = list(dims[:-1]) + [kv_len - dims[-1]]
            pad = relax.const(np.zeros(pad_dims, bool)) if is_bool \
                else relax.const(np.full(pad_dims, -np.inf, dtype), dtype)
            mask = relax.op.concat([mask, pad], axis=-1)
        bias = relax.op.where(mask, const(0.0), neg_inf) if is_bool else mask
    # per batch when the cache is external (nonpad_kv_seqlen), else one offset
    rows = np.arange(q_len, dtype=np.int64).reshape(q_len, 1)
    cols = np.arange(kv_len, dtype=np.int64).reshape(1, kv_len)
    if nonpad is not None and past_k is None:
        offset = relax.op.reshape(relax.op.astype(nonpad, "int64") - const(q_len, "int64"),
                                  [batch, 1, 1, 1])
        diff = relax.op.add(const(rows, "int64"), offset) - const(cols, "int64")
    else:
        diff = const(rows + past_len - cols, "int64")  # query position - key position
    allowed = []
    if int(attrs.get("is_causal", 0)):
        allowed.append(relax.op.greater_equal(diff, const(0, "int64")))
    left = int(attrs.get("left_window_size", -1))
    right = int(attrs.get("right_window_size", -1))
    if left >= 0:
        allowed.append(relax.op.less_equal(diff, const(left, "int64")))
    if right >= 0:
        allowed.append(relax.op.less_equal(relax.op.negative(diff), const(right, "int64")))
    if nonpad is not None:
        steps = relax.op.reshape(relax.op.astype(nonpad, "int64"), [batch, 1, 1, 1])
        allowed.append(relax.op.less(const(cols.reshape(1, 1, 1, kv_len), "int64"), steps))
    for condition in allowed:
        term = relax.op.where(condition, const(0.0), neg_inf)
        bias = term if bias is None else relax.op.add(bias, term)
    return None if bias is None else bb.normalize(bias)
