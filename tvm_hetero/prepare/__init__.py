"""Model preparation: a model's Relax module to its layered form (one ``call_tir`` per layer),
shaped for the devices' targets.

``prepare(mod, config)`` runs the pipeline of :mod:`.pipeline`; :class:`PrepareConfig` holds its
options and derives them from a device set (:meth:`PrepareConfig.for_devices`). Each Relax
rewrite is one module pass class in its own file (``drop_dropout``, ``simplify_stack_sum``,
``conv1d_as_conv2d``, ``merge_concatenated_convs``, ``pad_conv_channels``,
``blocked_conv_layout`` with ``clip_as_min_max``, ``constants_at_full_rank``,
``sink_layout_transforms`` and ``fold_constant_layouts``, ``op_kinds``, ``layer_outputs``);
``legalize`` lowers the blocked convolutions to the computes of :mod:`tvm_hetero.ops`. The pass
modules import TVM; this package does not until ``prepare`` runs.
"""

from .config import PrepareConfig
from .pipeline import prepare

__all__ = ["PrepareConfig", "prepare"]
