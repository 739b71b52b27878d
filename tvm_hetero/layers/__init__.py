"""What a layer is: one fused operator group (conv2d+bias+relu) of the layered module.

- :mod:`.classify`: which bindings of ``main`` are layers, their names, op kinds and layer kinds
  (the keys of the optimization rules);
- :mod:`.extract`: :class:`Layer` and :func:`extract_layers` (configuration, FLOPs, bytes,
  predecessors);
- :mod:`.layered`: the layered module kept per model and preparation config, and the placed
  module (each layer in the form of its device);
- :mod:`.table`: the layers as a text table.
"""

from .classify import LAYER_KINDS, classify_bindings, kernel_kind, layer_kind
from .extract import Layer, TensorInfo, distinct_param_bytes, extract_layers
from .layered import layered_module, placed_module
from .table import layers_table

__all__ = ["LAYER_KINDS", "Layer", "TensorInfo", "classify_bindings", "distinct_param_bytes",
           "extract_layers", "kernel_kind", "layer_kind", "layered_module", "layers_table",
           "placed_module"]
