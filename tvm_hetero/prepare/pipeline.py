"""The preparation pipeline: a model's Relax module to its *layered* form, in which every
``call_tir`` binding of ``main`` is one layer (a fused operator group).

Two phases, each a named ``tvm.transform.Sequential``:

- the graph phase (:func:`graph_phase`), on Relax ops: the model's part (:func:`model_phase`:
  inference-only forms out, constants folded, 1-D convolutions as 2-D, concatenated ones
  merged), then the forms' part (:func:`form_phase`: the convolutions reshaped for the CPU
  rules, padded to whole vectors and blocked, as the :class:`~tvm_hetero.prepare.PrepareConfig`
  says, for the convolutions whose layers run on a CPU: :mod:`.device_forms`);
- the lowering phase (:func:`lowering_phase`), in the target's context: every op legalized to
  TIR (blocked convolutions to :mod:`tvm_hetero.ops`), then fused into one PrimFunc per layer.
"""

from __future__ import annotations

import logging

from .config import PrepareConfig

logger = logging.getLogger(__name__)


def model_phase(config: PrepareConfig):
    """The graph phase's first part, the same whatever the devices, as one ``Sequential``
    named ``tvm_hetero.PrepareModel``: inference-only forms out, constants folded, 1-D
    convolutions as 2-D ones, concatenated convolutions merged. Its result is the graph the
    per-device forms (:mod:`.device_forms`) start from."""
    import tvm
    from tvm import relax

    from .conv1d_as_conv2d import Conv1dAsConv2d
    from .drop_dropout import DropDropout
    from .drop_padding_taps import DropPaddingTaps
    from .flatten_matmul_rows import FlattenMatmulRows
    from .merge_concatenated_convs import MergeConcatenatedConvs
    from .simplify_stack_sum import SimplifyStackSum

    t = relax.transform
    return tvm.transform.Sequential([
        # inference-only forms out: batch norm to arithmetic, dropout dropped, ONNX Sum as adds
        t.DecomposeOpsForInference(),
        t.CanonicalizeBindings(),
        DropDropout(),
        SimplifyStackSum(),
        t.CanonicalizeBindings(),  # aliases left by the rewrite block fusion
        # constants: batch-norm scales and shifts, reshaped weights
        t.FoldConstant(),
        # 1-D convolutions as 2-D ones of height 1, for the 2-D rules and layout
        *([Conv1dAsConv2d(), t.CanonicalizeBindings()] if config.conv1d_as_conv2d else []),
        # window taps that read only padding (dilated convolutions on small maps) dropped
        *([DropPaddingTaps()] if config.drop_padding_taps else []),
        # parallel convolutions of one input whose outputs a Concat joins: one convolution
        MergeConcatenatedConvs(),
        # a batched activation by a 2-D weight: one product of all the rows
        *([FlattenMatmulRows()] if config.flatten_matmul_rows else []),
        # one binding per value: the blocked layout's own CSE would merge the model's
        # duplicates (DropPaddingTaps' crops of one input for two convolutions) on a CPU only
        t.EliminateCommonSubexpr(),
        t.DeadCodeElimination(),
    ], name="tvm_hetero.PrepareModel")


def form_phase(config: PrepareConfig, keeps=None):
    """The graph phase's second part, the CPU forms of the convolutions, as one ``Sequential``
    named ``tvm_hetero.PrepareForms``: output channels padded to whole vectors, the blocked
    layout (and Winograd, chosen at legalization) where the model's convolutions pay for it.

    `keeps` (``call -> bool``, optional) names the convolutions that keep the model's form
    (those of layers placed on a device that is no CPU: :mod:`.device_forms`); by default
    every convolution may take the CPU forms."""
    import tvm
    from tvm import relax

    from .blocked_conv_layout import BlockedConvLayout
    from .pad_conv_channels import PadConvChannels

    return tvm.transform.Sequential([
        PadConvChannels(config.channel_lanes, config.channel_pad_waste, keeps),
        relax.transform.DeadCodeElimination(),
        BlockedConvLayout(config, keeps),
    ], name="tvm_hetero.PrepareForms")


def graph_phase(config: PrepareConfig):
    """The graph phase's passes (:func:`model_phase`, then :func:`form_phase` for every
    convolution), as one ``Sequential`` named ``tvm_hetero.PrepareGraph``."""
    import tvm

    return tvm.transform.Sequential([model_phase(config), form_phase(config)],
                                    name="tvm_hetero.PrepareGraph")


def fusing_passes(config: PrepareConfig, keeps=None) -> list:
    """The lowering phase up to and including ``FuseOps``: every op legalized to a TIR kernel
    (blocked convolutions to :mod:`tvm_hetero.ops`; `keeps` as in :func:`form_phase`),
    constants computed by kernels folded, the fused groups formed (Relax functions)."""
    from tvm import relax

    from .legalize import conv2d_legalizer, resize_legalizer, scan_legalizers

    t = relax.transform
    return [t.LegalizeOps({"relax.nn.conv2d": conv2d_legalizer(config, keeps),
                           "relax.image.resize2d": resize_legalizer(config, keeps),
                           **scan_legalizers()}),
            t.AnnotateTIROpPattern(), t.FoldConstant(), t.FuseOps()]


def lowering_phase(config: PrepareConfig, keeps=None):
    """The lowering phase's passes, as one ``Sequential`` named ``tvm_hetero.PrepareLowering``
    (run it in a target's context)."""
    import tvm
    from tvm import relax

    from .op_kinds import FuseTIRKeepingOpKinds

    return tvm.transform.Sequential([
        # every op to a TIR kernel; constants computed by kernels folded; fused groups
        *fusing_passes(config, keeps),
        # one PrimFunc per layer, the ops it fuses kept on it
        FuseTIRKeepingOpKinds(),
        relax.transform.DeadCodeElimination(),
    ], name="tvm_hetero.PrepareLowering")


def finish(mod, layouts_in_model: bool):
    """The end of every preparation, on a lowered module: the layout transforms that the CPU
    forms added are marked form kernels (:func:`~tvm_hetero.prepare.form_kernels.
    mark_form_kernels`: no layer of their own) unless the model's own graph had layout
    transforms (`layouts_in_model`), and every tensor ``main`` returns is a layer's output
    (:class:`~.layer_outputs.CopyOutputsToLayers`)."""
    from ..errors import ModelError
    from ..relax_ir import unlowered_calls
    from .form_kernels import mark_form_kernels
    from .layer_outputs import CopyOutputsToLayers

    left = unlowered_calls(mod)
    if left:  # TVM legalized nothing for them (a layout it has no lowering for, say)
        raise ModelError(f"cannot lower {', '.join(sorted(set(left)))} to TIR kernels with "
                         "TVM's legalization (unsupported attributes or layout)")
    if not layouts_in_model:
        mod = mark_form_kernels(mod)
    return CopyOutputsToLayers()(mod)


def prepare(mod, config: PrepareConfig | None = None, target=None):
    """Lower a model's Relax module to its layered form.

    Decomposes inference-only ops (and drops inference dropout), folds constants, runs 1-D
    convolutions as 2-D ones of height 1, merges convolutions of one input whose outputs a
    Concat joins into one convolution, pads the output channels of convolutions with constant
    weights up to whole vectors where that costs little (a ``strided_slice`` after the
    convolution keeps the model's output), converts the convolutions of models with enough
    convolution work to the blocked layout (a layout transform where the model's layout changes,
    the resizes, pools, concatenations and elementwise ops between blocked convolutions blocked
    too; 3x3 ones as Winograd where they fit), legalizes every op to TIR and fuses (FuseOps +
    FuseTIR), so that each ``call_tir`` binding of ``main`` is one layer. The ops of each fused
    group are kept in the PrimFunc attribute ``tvm_hetero.op_kinds``.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module whose ``main`` has weights bound as constants.
    config : PrepareConfig, optional
        The options (lanes, blocked layout, Winograd); by default those of the host CPU (the
        device ``cpu``: ``PrepareConfig.for_host()``). ``PrepareConfig.for_devices(devices)``
        follows a device set's targets.
    target : tvm.target.Target, optional
        The target in whose context ops are legalized (the host CPU by default). Legalization
        and fusion come out the same for LLVM and CUDA targets.

    Returns
    -------
    tvm.IRModule
        A new module; the input is not modified.

    Raises
    ------
    ModelError
        When an op cannot be lowered to a TIR kernel.
    """
    import tvm

    from ..devices import host_target_dict
    from .form_kernels import has_layout_transforms

    config = config or PrepareConfig.for_host()
    target = target or tvm.target.Target(host_target_dict())
    mod = model_phase(config)(mod)
    layouts_in_model = has_layout_transforms(mod)
    mod = form_phase(config)(mod)
    with target:
        mod = lowering_phase(config)(mod)
    return finish(mod, layouts_in_model)
