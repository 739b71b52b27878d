"""ONNX's Attention op (tvm_hetero/frontend/onnx/attention.py; TVM 0.27's importer takes it for
onnxruntime's contrib op and fails): the onnx package's Attention node cases through the tool's
path, a chosen one per feature by default, all 93 under ``-m slow``."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import tvm_hetero as th
from tvm_hetero.testing import run_onnx_node_case

FEATURES = [
    "test_attention_4d",                                   # plain 4-D
    "test_attention_3d_gqa_causal",                        # 3-D heads, grouped query, causal
    "test_attention_4d_attn_mask_bool_4d",                 # boolean mask
    "test_attention_4d_diff_heads_with_past_and_present_mask3d",  # cache, float mask, present
    "test_attention_3d_with_past_and_present_qk_matmul_softcap",  # soft cap, qk output mode 1
    "test_attention_4d_with_qk_matmul_softmax",            # qk output mode 3
    "test_attention_24_qk_matmul_output_mode3_softmax_precision",  # softmax precision
    "test_attention_4d_gqa_causal_nonpad_decode",          # external cache: nonpad_kv_seqlen
    "test_attention_23_boolmask_fullymasked_row_nan_robustness",  # a fully masked row: zeros
    "test_attention_4d_causal_nonpad_negative_offset_structural_empty",
    "test_attention_local_window_with_past",               # sliding window
    "test_attention_4d_causal_fp16",                       # float16
    "test_attention_4d_causal_bf16",                       # bfloat16 (tiled declines it)
]


def all_cases():
    from tvm_hetero.testing.models import _node_cases

    return [name for name in _node_cases()
            if name.startswith("test_attention") and not name.endswith("_expanded")]


def check_case(name):
    _, _, got, want = run_onnx_node_case(name)
    assert len(got) == len(want)
    low_precision = str(want[0].dtype) in ("float16", "bfloat16")
    for a, b in zip(got, want):
        assert a.shape == b.shape and str(a.dtype) == str(b.dtype)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                                   rtol=1e-2 if low_precision else 1e-4,
                                   atol=1e-2 if low_precision else 1e-6)


@pytest.mark.parametrize("name", FEATURES)
def test_attention_feature_matches_its_reference(name):
    check_case(name)


@pytest.mark.slow
def test_every_attention_node_case_matches_its_reference():
    failed = []
    for name in all_cases():
        try:
            check_case(name)
        except (AssertionError, th.HeteroError) as err:
            failed.append(f"{name}: {str(err).splitlines()[0][:200]}")
    assert len(all_cases()) >= 90 and not failed, "\n".join(failed)


def _attention_model(q_shape, kv_shape, **attrs):
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
              for name, shape in (("Q", q_shape), ("K", kv_shape), ("V", kv_shape))]
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], **attrs)
    graph = helper.make_graph([node], "attention", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


@pytest.mark.parametrize("model, message", [
    (_attention_model([1, 4, 8], [1, 4, 8]), "3-D inputs need q_num_heads and kv_num_heads"),
    (_attention_model([1, 3, 4, 8], [1, 2, 4, 8]),
     "3 query heads are not a multiple of 2 key/value heads"),
])
def test_bad_attention_is_a_one_line_error(model, message):
    with pytest.raises(th.ModelError, match=r"Attention \(node Attention_0\): " + message) \
            as err:
        th.load_model(model)
    assert "\n" not in str(err.value)
