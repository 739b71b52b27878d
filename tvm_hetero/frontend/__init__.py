"""Model loading: ONNX (path or ModelProto), Relax IRModule, torch ExportedProgram (or its
``.pt2`` file), ``zoo:NAME``.

- :mod:`.load`: :func:`load_model`, :class:`Model` and :class:`InputSpec`;
- :mod:`.onnx`: the ONNX importer (TVM's, with fixes by op family);
- :mod:`.zoo`: small real models made by code, addressable as ``zoo:NAME``.
"""

from .load import InputSpec, Model, load_model, static_shape_hint
from .zoo import ZOO, zoo_model

__all__ = ["InputSpec", "Model", "ZOO", "load_model", "static_shape_hint", "zoo_model"]
