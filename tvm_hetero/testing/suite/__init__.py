"""The architecture suite: the models ``benchmarks/model_suite.py`` and its A/B scripts time
against onnxruntime, and the helpers those scripts share.

The models are built by code with the onnx helper API (opset 17, seeded random weights,
nothing downloaded), plus the onnx package's light graphs with seeded weights. ``SUITE`` maps a
model name to a function returning ``(onnx.ModelProto, inputs)``: the inputs by ONNX input name
(token ids in range, attention masks of zeros and ones). LSTM and GRU, which TVM 0.27's ONNX
frontend does not import, come through tvm_hetero's own converter
(``tvm_hetero/frontend/onnx/recurrent.py``). MobileNetV2 is full depth; the MobileNetV3 and
EfficientNet entries are three blocks each. The same name gives the same ONNX bytes as when the
suite lived in ``benchmarks/suite_models.py``.

- :mod:`.graph`: :class:`GraphBuilder` (nodes, seeded weights, layers), graph inputs and
  seeded arrays;
- :mod:`.architectures`: the model builders (each takes its sizes, for small test instances)
  and ``SUITE``;
- :mod:`.harness`: onnxruntime sessions, :func:`suite_case`, :func:`alternating_best`, the A/B
  scripts' device set, the CPU's name, a model's weight bytes, the copy bandwidth.
"""

from ...devices import host_cpu_model as cpu_name  # the CPU the tables name
from .architectures import (SUITE, bert_layer, efficientnet_block, gpt2_block, light,
                            llama_decode, mlp, mobilenet_v2, mobilenet_v3_block, recurrent, tcn,
                            unet, vit, wide_and_deep, yolo_detector)
from .graph import OPSET, GraphBuilder, float_input, normal_array, strip_initializer_inputs
from .harness import (add_ab_args, alternating_best, copy_bandwidth_gbs, cpu_devices,
                      ort_cpu_session, suite_case, weight_bytes)

__all__ = ["GraphBuilder", "OPSET", "SUITE", "add_ab_args", "alternating_best", "bert_layer",
           "copy_bandwidth_gbs", "cpu_devices", "cpu_name", "efficientnet_block", "float_input",
           "gpt2_block", "light", "llama_decode", "mlp", "mobilenet_v2", "mobilenet_v3_block",
           "normal_array", "ort_cpu_session", "recurrent", "strip_initializer_inputs",
           "suite_case", "tcn", "unet", "vit", "weight_bytes", "wide_and_deep", "yolo_detector"]
