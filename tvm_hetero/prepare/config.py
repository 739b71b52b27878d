"""The options of model preparation, and how they follow the devices' targets."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError
from ..ops import winograd as winograd_op

logger = logging.getLogger(__name__)

# the lanes of the defaults: the widest CPU vector (AVX-512, 16 fp32 lanes)
DEFAULT_LANES = 16


@dataclass(frozen=True)
class PrepareConfig:
    """What :func:`~tvm_hetero.prepare.prepare` does to a model beyond lowering it.

    The field defaults are those of an AVX-512 CPU (16 fp32 lanes); :meth:`for_devices` derives
    the lanes from the targets of a device set, :meth:`for_host` from the host CPU (the default
    device ``cpu``; what ``prepare`` uses when given no configuration).

    Attributes
    ----------
    channel_lanes : int
        Output channels of convolutions with constant weights are padded up to a multiple of
        this (zero filters, the model's output kept by a slice that fuses into the
        convolution), so that kernels schedule channels in whole vectors; 1 pads nothing.
    channel_pad_waste : float
        ... only where that adds at most this fraction of the convolution's work.
    blocked_layout : bool
        Convert convolutions to the blocked layout ``NCHW[block_lanes]c`` (weights
        ``OIHW[block_lanes]i[block_lanes]o``) in models with enough convolution work.
    block_lanes : int
        Channels per block of the blocked layout; convolutions whose input and output channels
        are multiples of it are converted.
    blocked_depthwise : bool
        Depthwise convolutions of such channels go to the blocked layout too (weights
        ``OIHW1i[block_lanes]o``); off, they stay NCHW between transforms.
    blocked_min_model_flops : float
        The blocked layout is used when the model's convolutions add up to at least this many
        FLOPs, or when one of them runs as Winograd, or when it has depthwise convolutions to
        block (``blocked_depthwise``). ResNet-50: 41.3 -> 38.9 ms, SqueezeNet 1.1
        4.31 -> 3.93 ms; the zoo models (3-28 MFLOP of convolutions) ran 1-4 % slower blocked:
        the transforms in and out cost what their small kernels saved.
    winograd : bool
        Run the 3x3 stride-1 convolutions that fit (:func:`tvm_hetero.ops.winograd.fits`) as
        Winograd F(4x4, 3x3); only in the blocked layout.
    grouped_pixels : bool
        Lower grouped 1x1 stride-1 convolutions to one matrix product per group over the
        pixels padded to whole ``channel_lanes`` vectors
        (:mod:`tvm_hetero.ops.grouped_conv1x1`, the ``grouped-pixels-1x1`` rule); off, to
        TVM's grouped convolution.
    conv1d_as_conv2d : bool
        Run 1-D convolutions (NCW) as 2-D ones of height 1, the elementwise ops between them
        in 4-D (:class:`~tvm_hetero.prepare.conv1d_as_conv2d.Conv1dAsConv2d`), so that the
        2-D convolution rules and the blocked layout reach them.
    drop_padding_taps : bool
        Convolution taps that read only padding for every output are not computed
        (:class:`~tvm_hetero.prepare.drop_padding_taps.DropPaddingTaps`).
    separable_resize : bool
        Legalize bilinear resizes as two passes, the columns then the rows, with their
        indices and weights as constants (:mod:`tvm_hetero.ops.resize`, the
        ``separable-resize`` rule); off, TVM's ``resize2d``.
    flatten_matmul_rows : bool
        Take a product of a batched activation by a 2-D weight as one 2-D product of all its
        rows, its elementwise epilogue in 2-D
        (:class:`~tvm_hetero.prepare.flatten_matmul_rows.FlattenMatmulRows`).
    winograd_min_tiles, winograd_max_weight_bytes : int
        The Winograd fit test's thresholds (see :mod:`tvm_hetero.ops.winograd`).
    """

    channel_lanes: int = DEFAULT_LANES
    channel_pad_waste: float = 0.05
    blocked_layout: bool = True
    block_lanes: int = DEFAULT_LANES
    blocked_depthwise: bool = True
    blocked_min_model_flops: float = 200e6
    winograd: bool = True
    grouped_pixels: bool = True
    conv1d_as_conv2d: bool = True
    drop_padding_taps: bool = True
    flatten_matmul_rows: bool = True
    separable_resize: bool = True
    winograd_min_tiles: int = winograd_op.MIN_TILES
    winograd_max_weight_bytes: int = winograd_op.MAX_WEIGHT_BYTES

    def __post_init__(self):
        for name in ("channel_lanes", "block_lanes"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"PrepareConfig.{name} must be at least 1, got "
                                 f"{getattr(self, name)}")

    def winograd_fits(self, batch, in_channels, out_channels, out_h, out_w, window, strides,
                      padding, dilation, groups) -> bool:
        """Whether a float32 convolution runs as Winograd under this configuration."""
        return self.winograd and self.blocked_layout and winograd_op.fits(
            batch, in_channels, out_channels, out_h, out_w, window, strides, padding, dilation,
            groups, lanes=self.block_lanes, min_tiles=self.winograd_min_tiles,
            max_weight_bytes=self.winograd_max_weight_bytes)

    @classmethod
    def for_target(cls, target: Any, **overrides) -> "PrepareConfig":
        """The configuration for one target (a ``tvm.target.Target`` or its JSON dict).

        An LLVM CPU target's widest vector sets the lanes of channel padding and of the blocked
        layout (:func:`tvm_hetero.target.vector_lanes`: 16 with AVX-512, 8 with AVX2
        such as ``mcpu: haswell``, 4 otherwise); other targets keep the defaults. `overrides`
        replace fields.
        """
        import tvm

        from ..target import vector_lanes

        target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
        config = cls()
        if target.kind.name == "llvm":
            lanes, _ = vector_lanes(target)
            config = replace(config, channel_lanes=lanes, block_lanes=lanes)
        return replace(config, **overrides)

    @classmethod
    def model_form(cls, **overrides) -> "PrepareConfig":
        """The configuration of the model's own form, for a device that is no CPU (a GPU):
        no channel padding, no blocked layout, no Winograd, no pixel padding; the layers of a
        placement on such devices are prepared so (:mod:`~tvm_hetero.prepare.device_forms`)."""
        return replace(cls(channel_lanes=1, blocked_layout=False, winograd=False,
                           grouped_pixels=False), **overrides)

    @classmethod
    def for_host(cls, **overrides) -> "PrepareConfig":
        """The configuration for the host CPU (the device ``cpu``)."""
        from ..devices import host_target_dict

        return cls.for_target(host_target_dict(), **overrides)

    @classmethod
    def for_devices(cls, devices, **overrides) -> "PrepareConfig":
        """The configuration for a device set: that of its most capable CPU device (the widest
        vectors among its LLVM targets; the first of those in a tie), which is the one the
        convolutions are worth placing on; the defaults when the set has no CPU device. The
        other devices run the layout this gives (their rules schedule other block widths with
        their generic loops).

        Parameters
        ----------
        devices : DeviceSet or list of Device
        overrides
            Fields to replace (``winograd=False``, ...).
        """
        from ..target import vector_lanes

        cpus = [dev for dev in devices if dev.family == "cpu" and dev.kind == "llvm"]
        if not cpus:
            return replace(cls(), **overrides)
        widest = max(cpus, key=lambda dev: vector_lanes(dev.tvm_target())[0])
        config = cls.for_target(widest.tvm_target(), **overrides)
        logger.debug("preparation for %s (%s): %s", widest.name, widest.target, config)
        return config
