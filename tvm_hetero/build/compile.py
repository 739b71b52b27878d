"""Build a placed model into ONE executable that runs across its devices.

The build is ``prepare`` -> ``AnnotateDevice`` -> ``RealizeVDevice`` -> per-target scheduling ->
the Relax VM lowering passes -> VM codegen -> one ``tirx.build`` per distinct target, linked
into one library. TVM 0.27 compiles all LLVM kernels of one ``tirx.build`` with ONE target even
when their ``target`` attributes differ, so kernels are built per target here and the modules
imported into the first (``VMLink``); each layer's machine code is then its own device's.
What the build returns, a :class:`~tvm_hetero.build.runtime.CompiledModel`, runs, times and
exports it (:mod:`tvm_hetero.build.runtime`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from .._native import native_log_to_logging
from ..devices import DeviceSet, host_target_dict, use_every_cpu_thread
from ..errors import BuildError, error_message
from ..frontend.load import load_model
from ..layers.extract import extract_layers
from ..layers.layered import cpu_only_on_a_cpu, layered_module, placed_module
from ..optimize import OptimizeLayers, RuleTable, schedule_passes
from ..optimize.metaschedule import KernelTuningDatabase
from ..placement import Placement
from ..prepare import PrepareConfig
from ..relax_ir import main_bindings
from . import cuda_cache
from .annotate import AnnotateDevice, used_devices
from .runtime import KERNELS_KEY, META_FORMAT, META_FUNC, META_VERSION, CompiledModel

logger = logging.getLogger(__name__)


def _import_tvm():
    import tvm
    from tvm import relax

    return tvm, relax


def _lower(mod):
    """The Relax VM lowering of TVM's default pipeline (the same for every backend here).

    TVM 0.27's StaticPlanBlockMemory lets tensors of two devices share one storage (it ignores
    the vdevice when it reuses a storage token), which fails at run time with "Mismatched
    device_id". Its result is checked, and where it shares storage across devices the module is
    lowered without static planning: the VM's pooled allocator then serves those tensors.
    """
    _, relax = _import_tvm()
    t = relax.transform
    seq = _import_tvm()[0].transform.Sequential
    mod = seq([t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(),
               t.CallTIRRewrite()])(mod)
    planned = t.StaticPlanBlockMemory()(mod)
    if _storage_shared_across_devices(planned):
        logger.info("static memory planning would share storage across devices; "
                    "allocating those tensors at run time instead")
    else:
        mod = planned
    return seq([t.LowerAllocTensor(), t.KillAfterLastUse(), t.LowerRuntimeBuiltin(),
                t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()])(mod)


def _storage_shared_across_devices(mod) -> bool:
    """Whether a planned storage holds tensors of a device other than its own."""
    tvm, relax = _import_tvm()
    alloc_storage = tvm.ir.Op.get("relax.memory.alloc_storage")
    alloc_tensor = tvm.ir.Op.get("relax.memory.alloc_tensor")
    for func in mod.functions.values():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        storage_device = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if not isinstance(value, relax.Call):
                    continue
                if value.op.same_as(alloc_storage):
                    storage_device[binding.var] = int(value.args[1].value)
                elif value.op.same_as(alloc_tensor) and value.args[0] in storage_device:
                    if int(value.args[4].value) != storage_device[value.args[0]]:
                        return True
    return False


def _add_meta_function(mod, meta: dict[str, Any]):
    """A ``hetero_meta()`` function returning the executable's description as JSON."""
    tvm, relax = _import_tvm()
    bb = relax.BlockBuilder()
    with bb.function(META_FUNC, [], attrs={"global_symbol": META_FUNC}):
        bb.emit_func_output(tvm.ir.StringImm(json.dumps(meta, sort_keys=True)))
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                       global_infos=mod.global_infos)
    out[tvm.ir.GlobalVar(META_FUNC)] = bb.get()[META_FUNC]
    return out


class KernelCache:
    """Compiled kernels by (name, structure, target), shared by the builds of one process.

    Candidates of one model differ only in their placement: a layer's kernel for a given
    target is the same in every candidate, so a search compiles it once. Entries are whole
    runtime modules, linked into each executable that needs them.
    """

    def __init__(self):
        self._modules: dict[tuple[str, int, str], Any] = {}
        self.hits = 0
        self.misses = 0

    def get(self, gv, func, target):
        import tvm
        import tvm_ffi

        key = (gv.name_hint, int(tvm_ffi.structural_hash(func)), str(target))
        if key not in self._modules:
            self.misses += 1
            self._modules[key] = tvm.tirx.build(tvm.IRModule({gv: func}), target=target)
        else:
            self.hits += 1
        return self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)


def _link_per_target(mod, host_target, kernel_cache: KernelCache | None = None,
                     stats: "BuildStats | None" = None):
    """VM codegen, then one ``tirx.build`` per distinct target (or one per kernel, through
    `kernel_cache`), linked into one executable. Each ``tirx.build``'s seconds go to `stats`
    (``target_compile_s``, or ``kernel_compile_s`` per kernel through `kernel_cache`)."""
    tvm, relax = _import_tvm()
    from tvm.relax import _ffi_api as relax_ffi
    from tvm.relax.vm_build import VMExecutable, _vmcodegen

    builder = relax.ExecBuilder()
    leftover = _vmcodegen(builder, mod, "bytecode")
    groups: dict[str, tuple[Any, dict]] = {}
    for gv, func in leftover.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            target = func.attrs.get("target") if func.attrs is not None else None
            key = str(target)
            if target is None:  # host-side helpers (shape functions) run on the host CPU
                target = host_target
                func = func.with_attr("target", target)
                # built apart from the kernels: in one tirx.build with a shape function, a
                # CPU kernel of the same target ran 2.3x slower (a row loop, 768 x 3072)
                key = f"host {target}"
            groups.setdefault(key, (target, {}))[1][gv] = func
    libs: dict[str, Any] = {}
    modules: list[tuple[bool, Any]] = []  # (is llvm, module)
    for key, (target, funcs) in groups.items():
        is_llvm = target.kind.name == "llvm"
        if kernel_cache is None:
            start = time.perf_counter()
            libs[key] = tvm.tirx.build(tvm.IRModule(funcs, attrs=leftover.attrs), target=target)
            if stats is not None:
                stats.target_compile_s[key] = time.perf_counter() - start
            modules.append((is_llvm, libs[key]))
            continue
        for gv, func in funcs.items():
            start = time.perf_counter()
            modules.append((is_llvm, kernel_cache.get(gv, func, target)))
            if stats is not None:
                stats.kernel_compile_s[gv.name_hint] = time.perf_counter() - start
    if kernel_cache is None:
        modules.sort(key=lambda entry: not entry[0])  # an LLVM module is the root
        root, rest = (modules[0][1], modules[1:]) if modules else (None, [])
    else:  # cached modules are shared between builds: import them into a fresh root
        root, rest = _empty_module(host_target), modules
    for _, module in rest:
        root.import_module(module)
    return VMExecutable(relax_ffi.VMLink(builder, None, root, [], {})), libs


def _empty_module(host_target):
    """A fresh host module holding one no-op function: the root that kernels are imported into."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def hetero_root():
        T.func_attr({"global_symbol": "__tvm_hetero_root"})
        T.evaluate(0)

    return tvm.tirx.build(tvm.IRModule({"__tvm_hetero_root": hetero_root}),
                          target=host_target)


@dataclass
class BuildStats:
    """Where build time went, in seconds."""

    prepare_s: float = 0.0
    annotate_s: float = 0.0
    lower_s: float = 0.0
    codegen_s: float = 0.0
    # kernel -> the optimization that scheduled it ("meta-schedule" when tuned, None: none)
    rules: dict[str, str | None] = field(default_factory=dict)
    # kernel -> the rule's choices a tuning database measured faster (``{choice: option}``)
    tuned_choices: dict[str, dict[str, int]] = field(default_factory=dict)
    # target (``CompiledModel.libs``' keys) -> seconds of the one ``tvm.tirx.build`` compiling
    # its kernels together (LLVM code generation is most of ``codegen_s``); empty with a
    # kernel cache
    target_compile_s: dict[str, float] = field(default_factory=dict)
    # kernel -> seconds of its own ``tvm.tirx.build``, where a kernel cache compiles kernels
    # one by one (near 0 for a kernel the cache held already); empty without one. Build with
    # ``kernel_cache=KernelCache()`` to see which kernels' code generation is slow
    # (:meth:`slowest_kernels`).
    kernel_compile_s: dict[str, float] = field(default_factory=dict)
    # CUDA modules compiled to a binary during this build, and those found in the disk cache
    # (:mod:`tvm_hetero.build.cuda_cache`). Both stay 0 where no CUDA runtime is present: the
    # library then carries CUDA source, compiled when it is loaded on a GPU machine.
    cuda_compiles: int = 0
    cuda_cache_hits: int = 0

    @property
    def total_s(self) -> float:
        return self.prepare_s + self.annotate_s + self.lower_s + self.codegen_s

    def slowest_kernels(self, count: int = 5) -> list[tuple[str, float, str | None]]:
        """``(kernel, compile seconds, rule)`` of the `count` kernels whose code generation took
        longest (from ``kernel_compile_s``: a build with a kernel cache), slowest first."""
        ranked = sorted(self.kernel_compile_s.items(), key=lambda item: -item[1])[:count]
        return [(name, seconds, self.rules.get(name)) for name, seconds in ranked]


@native_log_to_logging()
def build(model: Any, placement: Placement | str, devices: DeviceSet | Sequence[str],
          *, extra_passes: Sequence | None = None,
          kernel_cache: KernelCache | None = None, optimize: bool = True,
          tuning_db: "str | os.PathLike | KernelTuningDatabase | None" = None,
          unscheduled: Sequence[str] = (),
          stats: BuildStats | None = None,
          rules: RuleTable | None = None) -> "CompiledModel":
    """Build a model with its layers placed on devices into one executable.

    Parameters
    ----------
    model : Model, str, onnx.ModelProto or tvm.IRModule
        Anything :func:`load_model` accepts.
    placement : Placement or str
        ``{layer: device}``, or ``"all:DEVICE"``, or a placement JSON path.
    devices : DeviceSet or list of str
        The devices. The executable runs on those the placement uses, in this order (the VM's
        device order; the model's constants are loaded onto the first).
    extra_passes : list of tvm.transform.Pass, optional
        Passes run after device annotation and scheduling, before VM lowering.
    optimize : bool
        Schedule each kernel by the optimization table for its device (default True; False
        keeps TVM's default CPU loops, for reference builds).
    tuning_db : str or KernelTuningDatabase, optional
        A tuning directory (:func:`tvm_hetero.tune_kernels`): kernels tuned there for their
        device, and measured faster than the rules (of `rules`, compared under that table),
        take their tuned schedule.
    kernel_cache : KernelCache, optional
        Reuse kernels compiled by earlier builds (a search's builder passes one); the per-target
        libraries (``CompiledModel.libs``) are then not assembled.
    unscheduled : sequence of str, optional
        With `optimize`: names of CPU kernels (``stats.rules`` keys) that keep TVM's default
        loops instead of their rule or tuned schedule (verification, finding a rule at fault).
    stats : BuildStats, optional
        A fresh :class:`BuildStats` to fill in place (it becomes ``CompiledModel.stats``):
        its ``rules`` fill as scheduling chooses them, so they are known even when the build
        then fails (the graph fuzzer reads them so).
    rules : RuleTable, optional
        With `optimize`: the optimization table scheduling the kernels
        (``optimize.default_table()`` or a variant of it, e.g.
        ``default_table().without("tiled")``); None, the default: the default table.

    Returns
    -------
    CompiledModel
        The executable, its devices, inputs and placement.

    Raises
    ------
    PlacementError, ModelError, BuildError
    """
    tvm, relax = _import_tvm()
    model = load_model(model)
    devices = devices if isinstance(devices, DeviceSet) else DeviceSet.parse(devices)
    stats = BuildStats() if stats is None else stats
    start = time.perf_counter()
    use_every_cpu_thread()
    # prepared for the whole set, as the search's layers were (not only the devices used)
    layered = layered_module(model, PrepareConfig.for_devices(devices))
    layers = extract_layers(layered)
    if isinstance(placement, str):
        placement = Placement.parse(placement, layers)
    placement.validate(layers, devices)
    # index checks run on a CPU wherever they are placed (the meta records where they ran;
    # a set without a CPU gains the host's)
    placement, devices = cpu_only_on_a_cpu(placement, layered, devices)
    # each layer in the form of its device (the same layer names): docs/design.md
    layered = placed_module(model, devices, placement)
    devices = used_devices(placement, devices)
    stats.prepare_s = time.perf_counter() - start

    start = time.perf_counter()
    annotated = AnnotateDevice(placement, devices, lift_weights=True)(layered)
    annotated = relax.transform.RealizeVDevice()(annotated)
    main = annotated["main"]
    vdevices = list(annotated.global_infos["vdevice"])
    input_devices = [_vdevice_index(param.ty.vdevice, vdevices)
                     for param in main.params[:len(model.inputs)]]
    num_weights = len(main.params) - len(model.inputs)
    meta = {
        "format": META_FORMAT, "version": META_VERSION, "tvm_version": tvm.__version__,
        "model": model.name, "model_fingerprint": model.fingerprint(),
        "devices": devices.to_json(), "inputs": [s.to_json() for s in model.inputs],
        "input_devices": input_devices, "num_weights": num_weights,
        "placement": dict(placement.assignment),
        "shape_ranges": {name: r.to_json() for name, r in model.shape_ranges.items()},
    }
    stats.annotate_s = time.perf_counter() - start

    start = time.perf_counter()
    host = tvm.target.Target(host_target_dict())
    tuning = None
    if tuning_db is not None:
        tuning = tuning_db if isinstance(tuning_db, KernelTuningDatabase) \
            else KernelTuningDatabase(tuning_db)
        tuning.stale.clear()
    try:
        with host:
            scheduling = schedule_passes(devices, optimize, tuning, unscheduled, rules)
            try:
                scheduled = tvm.transform.Sequential(scheduling)(annotated)
            finally:  # what scheduling chose, known to the extra passes and when it fails
                for step in scheduling:
                    if isinstance(step, OptimizeLayers):
                        stats.rules.update(step.chosen)
                        stats.tuned_choices.update(step.tuned_choices)
            if extra_passes:
                scheduled = tvm.transform.Sequential(list(extra_passes))(scheduled)
            # what a profile of the library needs, once the rules are known
            meta[KERNELS_KEY] = _kernel_meta(layered, annotated, scheduled, devices,
                                             stats.rules)
            lowered = _lower(_add_meta_function(scheduled, meta))
    except Exception as err:
        raise BuildError(f"lowering the placed module failed: {error_message(err)}") from err
    stats.lower_s = time.perf_counter() - start
    if tuning is not None and tuning.stale:
        logger.warning("%d kernels of tuning database %s were compared under another version of "
                       "the rules and keep the rules (%s); tuning again (any trials) compares "
                       "them anew without re-tuning", len(tuning.stale), tuning.path,
                       ", ".join(sorted(tuning.stale)[:5])
                       + (", ..." if len(tuning.stale) > 5 else ""))

    start = time.perf_counter()
    # compiled CUDA comes from the disk cache where a CUDA runtime compiles it at build time
    cuda = cuda_cache.install() if any(d.kind == "cuda" for d in devices) else None
    before = cuda.snapshot() if cuda is not None else None
    try:
        executable, libs = _link_per_target(lowered, host, kernel_cache, stats=stats)
    except Exception as err:
        raise BuildError(f"code generation failed: {error_message(err)}") from err
    if cuda is not None:
        done = cuda.snapshot().since(before)
        stats.cuda_compiles, stats.cuda_cache_hits = done.compiles, done.hits
    stats.codegen_s = time.perf_counter() - start
    logger.info("built %s for %s in %.2fs", model.name, ", ".join(devices.names), stats.total_s)
    return CompiledModel(executable, meta, devices, model.inputs, placement, libs=libs,
                         stats=stats)


def _kernel_meta(layered, annotated, scheduled, devices: DeviceSet,
                 rules: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """``{kernel: {"layers", "device", "rule", "flops"}}`` for every kernel ``main`` of the
    scheduled module calls (``hetero_meta()``'s ``kernels``, which a profile reads).

    ``layers``: the layers calling it, in call order (one kernel can serve several layers of one
    device; packing kernels the rules added serve none); ``device``: the device name; ``rule``:
    the rule that scheduled it (``BuildStats.rules``; None: TVM's default loops); ``flops``:
    TVM's estimate of the kernel as written, before scheduling (None where it has none, and
    for kernels over symbolic extents).
    """
    tvm, relax = _import_tvm()
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..layers.classify import classify_bindings
    from ..optimize.pass_ import is_static

    call_tir = tvm.ir.Op.get("relax.call_tir")

    def calls(mod):
        return [b for b in main_bindings(mod) if isinstance(b.value, relax.Call)
                and b.value.op.same_as(call_tir)]

    # annotation emits one call per call of the layered module, in order
    names = [info.name for binding, info in classify_bindings(layered) if info is not None
             and binding.value.op.same_as(call_tir)]
    layers: dict[str, list[str]] = {}
    for binding, layer in zip(calls(annotated), names):
        layers.setdefault(binding.value.args[0].name_hint, []).append(layer)
    vdevices = list(scheduled.global_infos["vdevice"])
    out: dict[str, dict[str, Any]] = {}
    for binding in calls(scheduled):
        gv = binding.value.args[0]
        if gv.name_hint in out:
            continue
        ty = binding.var.ty
        if isinstance(ty, relax.TupleType) and len(ty.fields):
            ty = ty.fields[0]
        device = _vdevice_index(getattr(ty, "vdevice", None), vdevices)
        func = annotated[gv.name_hint] if gv.name_hint in annotated else scheduled[gv]
        try:
            # over symbolic extents TVM's estimate counts them as 1: no figure rather than
            # a wrong one
            flops = float(estimate_tir_flops(tvm.IRModule({"main": func}))) \
                if is_static(func) else None
        except Exception:  # noqa: BLE001 (an estimate TVM cannot make is no FLOPs)
            flops = None
        out[gv.name_hint] = {"layers": layers.get(gv.name_hint, []),
                             "device": devices.names[device], "rule": rules.get(gv.name_hint),
                             "flops": flops}
    return out


def _vdevice_index(vdevice, vdevices) -> int:
    import tvm_ffi

    if vdevice is None:
        return 0
    for index, candidate in enumerate(vdevices):
        if tvm_ffi.structural_equal(candidate, vdevice):
            return index
    return 0
