"""MetaSchedule tuning of a placement's kernels, per device, into a
:class:`~.records.KernelTuningDatabase`; each tuned kernel timed against the rules."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from ...devices import DeviceSet, host_num_cores
from ...errors import BuildError, HeteroError, error_message
from ...frontend.load import load_model
from ...layers.extract import extract_layers
from ...layers.layered import placed_module
from ...ops.winograd import is_winograd
from ...prepare import PrepareConfig
from ...placement import Placement
from ..choices import Choices, variants
from ..kernel import build_kernel, kernel_for, schedule_kernel, time_kernel
from ..table import RULES_VERSION, RuleTable, resolve_table
from .records import KernelChoice, KernelTuningDatabase, workload

logger = logging.getLogger(__name__)

# Every fresh MetaSchedule builder worker imports tvm.s_tir.tensor_intrin (~40 s on 2 cores):
# TVM's default 30 s builder timeout fails every build (docs/design.md, "Tuning (MetaSchedule)").
BUILDER_TIMEOUT_S = 300
RUNNER_TIMEOUT_S = 60
# A tuned kernel and the rules' kernel are timed alternately this many times, the best of each
# compared.
COMPARE_ROUNDS = 5


@dataclass
class TuningSummary:
    """What :func:`tune_kernels` did: per kernel, the choice; and the wall time."""

    database: str
    choices: list[KernelChoice] = field(default_factory=list)
    reused: int = 0
    tuned: int = 0
    kept_rule: int = 0  # Winograd kernels: MetaSchedule's search does not reach their rule
    symbolic: int = 0  # kernels whose shapes depend on input values: they keep their rule
    as_written: int = 0  # kernels written already scheduled (index checks): kept as written
    unsearchable: int = 0  # kernels MetaSchedule cannot search: their rule's choices measured
    left_to_rules: int = 0  # light kernels outside `kernel_share`: not tuned this run
    seconds: float = 0.0


def is_scheduled(func) -> bool:
    """Whether a kernel was written already scheduled (``tir.is_scheduled``: the frontend's
    index checks), which no rule and no tuning touches."""
    return func.attrs is not None and bool(func.attrs.get("tir.is_scheduled", False))


def has_symbolic_shape(func) -> bool:
    """Whether a kernel has a dimension only known at run time (an output of NonZero, Unique,
    Compress ...): a buffer with a symbolic extent or a dimension passed in as a scalar."""
    import tvm

    for param in func.params:
        shape = getattr(param.ty, "shape", None)
        if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
            return True
    return False


def _heaviest(kernels, device, share, rules):
    """The kernels that make up `share` of the device's time under the rules (each kernel
    timed alone, rule-scheduled, times its calls), heaviest first."""
    weighted = []
    for kernel in kernels:
        name, func, calls = kernel
        ms = time_kernel(*kernel_for(func, device, rules=rules), device)
        weighted.append((ms * calls, kernel))
        logger.info("kernel %s on %s: %.4f ms x %d calls under the rules", name, device.name,
                    ms, calls)
    weighted.sort(key=lambda item: -item[0])
    total = sum(weight for weight, _ in weighted)
    chosen, covered = [], 0.0
    for weight, kernel in weighted:
        if chosen and covered >= share * total:
            break
        chosen.append(kernel)
        covered += weight
    return chosen


def _kernels_by_device(model, placement, devices):
    """``{device name: [(func name, func, calls)]}`` for the kernels the placement runs."""
    placement.validate(extract_layers(model, PrepareConfig.for_devices(devices)), devices)
    mod = placed_module(model, devices, placement)  # each layer in its device's form
    layers = extract_layers(mod)
    calls: dict[str, Counter] = {}
    for layer in layers:
        calls.setdefault(placement[layer.name], Counter())[layer.func_name] += 1
    return {device: [(name, mod[mod.get_global_var(name)], count)
                     for name, count in sorted(counter.items())]
            for device, counter in calls.items()}


def tune_kernels(model, placement, devices, trials: int,
                 database: str | KernelTuningDatabase, *, kernel_share: float = 1.0,
                 trials_per_iter: int = 16, seed: int = 0, progress=None,
                 rules: RuleTable | None = None) -> TuningSummary:
    """Tune the kernels of `placement` with MetaSchedule, keeping the results in `database`.

    Parameters
    ----------
    model : Model or anything :func:`load_model` accepts
    placement : Placement or str
        ``"all:DEVICE"`` or a :class:`Placement`.
    devices : DeviceSet or list of str
        Every device the placement uses must be present here (kernels are timed on it).
    trials : int
        MetaSchedule's global trial budget per device, shared by that device's kernels in
        proportion to how often the model calls them (its gradient task scheduler). Kernels
        already in the database are reused, not tuned again; 0 tunes nothing.
    database : str or KernelTuningDatabase
        The tuning directory.
    kernel_share : float
        Tune only the heaviest kernels: those that together make up this share (0 < share <= 1)
        of the device's time under the rules, each kernel timed alone rule-scheduled times its
        calls (default 1.0: every kernel, nothing timed first). MetaSchedule's task scheduler
        spends a first round of `trials_per_iter` trials on every kernel it is given, so a
        small budget over many kernels goes mostly to the light ones; 0.8 puts it where the
        time is. The kernels left out keep their rule and are tuned by a later run with a
        larger share; those a run measured before are compared again whatever the share.
        Winograd kernels and kernels with shapes known only at run time are never tuned
        (they keep their rule) and are not counted in the share.
    trials_per_iter : int
        Candidates measured per MetaSchedule search iteration.
    progress : callable, optional
        Called with one message per device.
    rules : RuleTable, optional
        The optimization table tuned kernels are compared against (None, the default: the
        default table). Comparisons are kept per table: a build uses them only under the same
        table (``build(..., rules=...)``); MetaSchedule's own records are shared by all.

    Returns
    -------
    TuningSummary
    """
    if trials < 0:
        raise HeteroError(f"tuning trials must be >= 0, got {trials}")
    if not 0 < kernel_share <= 1:
        raise HeteroError(f"the kernel share to tune must be in (0, 1], got {kernel_share}")
    start = time.perf_counter()
    table = resolve_table(rules)
    model = load_model(model)
    devices = devices if isinstance(devices, DeviceSet) else DeviceSet.parse(devices)
    db = database if isinstance(database, KernelTuningDatabase) \
        else KernelTuningDatabase(database)
    if isinstance(placement, str):
        placement = Placement.parse(placement, extract_layers(
            model, PrepareConfig.for_devices(devices)))
    summary = TuningSummary(database=db.path)
    by_device = _kernels_by_device(model, placement, devices)
    for device_name, kernels in by_device.items():
        device = devices[device_name]
        target = device.tvm_target()
        if device.family == "cpu":  # the winograd rule beats what MetaSchedule finds
            winograd = [kernel for kernel in kernels if is_winograd(kernel[1])]
            summary.kept_rule += len(winograd)
            kernels = [kernel for kernel in kernels if kernel not in winograd]
        # shapes known only at run time: MetaSchedule cannot measure them, nor a build apply
        # a schedule tuned at fixed shapes to them
        symbolic = [kernel for kernel in kernels if has_symbolic_shape(kernel[1])]
        for name, _, _ in symbolic:
            logger.info("kernel %s on %s keeps its rule, not tuned: its shapes depend on input "
                        "values", name, device_name)
        summary.symbolic += len(symbolic)
        kernels = [kernel for kernel in kernels if not has_symbolic_shape(kernel[1])]
        # written already scheduled (the frontend's index checks): no rule, nothing to tune
        written = [kernel for kernel in kernels if is_scheduled(kernel[1])]
        for name, _, _ in written:
            logger.info("kernel %s on %s is kept as written, not tuned", name, device_name)
        summary.as_written += len(written)
        kernels = [kernel for kernel in kernels if not is_scheduled(kernel[1])]
        todo = [(name, func, calls) for name, func, calls in kernels
                if not db.has(func, target, table)]
        summary.reused += len(kernels) - len(todo)
        if not todo or trials == 0:
            continue
        DeviceSet([device]).check_runtime()  # kernels are measured on the device itself
        if kernel_share < 1:
            heaviest = _heaviest(kernels, device, kernel_share, table)
            chosen = {name for name, _, _ in heaviest}
            # the share bounds what is tuned; a kernel measured before (by a run whose share
            # took it) is compared again whatever this run's share, or its tuned schedule
            # would be left unused
            measured, left = [], []
            for kernel in todo:
                if kernel[0] not in chosen:
                    (measured if db.has_records(kernel[1], target) else left).append(kernel)
            for name, _, _ in left:
                logger.info("kernel %s on %s keeps its rule, not tuned: outside the heaviest "
                            "%.0f %% of the time", name, device_name, 100 * kernel_share)
            summary.left_to_rules += len(left)
            # heaviest first: the task scheduler's first round goes through them in this order
            todo_names = {name for name, _, _ in todo}
            todo = [kernel for kernel in heaviest if kernel[0] in todo_names] + measured
            if not todo:
                continue
        # tuned before, compared under older rules: compared again, not tuned again
        untuned = [kernel for kernel in todo if not db.has_records(kernel[1], target)]
        if untuned:
            if progress:
                progress(f"tuning {len(untuned)} kernels on {device_name} ({trials} trials)")
            summary.unsearchable += run_metaschedule(
                untuned, target, trials, trials_per_iter, seed, db,
                device.target.get("num-cores"))
        for name, func, calls in todo:
            db.record(func, target, compare_kernel(db, name, func, calls, device, target, table),
                      table)
            summary.tuned += 1
        db.save_choices()
    for device_name, kernels in by_device.items():
        target = devices[device_name].tvm_target()
        for name, func, calls in kernels:
            choice = db.comparison(func, target, table)
            if choice:
                summary.choices.append(
                    KernelChoice.from_stored(dict(choice, name=name, device=device_name), calls))
    summary.seconds = time.perf_counter() - start
    return summary


def run_metaschedule(kernels, target, trials, trials_per_iter, seed, db,
                     num_cores) -> int:
    """Tune `kernels` (``[(name, func, calls)]``) together on `target` into `db`; returns how
    many MetaSchedule could not search (its design space generation raised on them: they are
    left out, logged, and keep their rule)."""
    from tvm.s_tir import meta_schedule as ms

    from .builder_pool import PooledBuilder, import_tensor_intrinsics

    import_tensor_intrinsics()  # before TuneContext imports them the slow way
    cores = num_cores or host_num_cores()
    contexts, weights = [], []
    for index, (name, func, calls) in enumerate(kernels):
        context = ms.TuneContext(mod=workload(func, target), target=target,
                                 space_generator="post-order-apply",
                                 search_strategy="evolutionary", task_name=name,
                                 rand_state=seed + index, num_threads=cores).clone()
        try:  # one kernel MetaSchedule cannot search would fail every kernel's tune
            context.space_generator.generate_design_space(context.mod)
        except Exception as err:  # noqa: BLE001 (MetaSchedule raises TVMError/RuntimeError)
            logger.warning("MetaSchedule cannot search kernel %s (it keeps its rule): %s",
                           name, error_message(err).splitlines()[-1].strip())
            continue
        contexts.append(context)
        weights.append(float(calls))
    if not contexts:
        return len(kernels)
    builder = PooledBuilder(max_workers=cores, timeout_sec=BUILDER_TIMEOUT_S)
    try:
        ms.tune_tasks(
            tasks=contexts, task_weights=weights,
            work_dir=db.path, max_trials_global=trials,
            num_trials_per_iter=min(trials_per_iter, trials),
            builder=builder,
            runner=ms.runner.LocalRunner(timeout_sec=RUNNER_TIMEOUT_S),
            database=db.ms_database, cost_model=ms.cost_model.XGBModel(
                num_tuning_cores=cores, tree_method="auto"))
    except Exception as err:  # noqa: BLE001 (MetaSchedule raises TVMError/RuntimeError)
        raise BuildError(f"MetaSchedule tuning failed: {error_message(err)}") from err
    finally:
        builder.shutdown()
    return len(kernels) - len(contexts)


def compare_kernel(db, name, func, calls, device, target, rules: RuleTable | None = None) -> dict:
    """Time the tuned kernel (when MetaSchedule found one), the kernel scheduled by the rules
    of `rules` (None: the default table) and the rule's variants; returns the comparison to
    store."""
    import tvm
    import tvm_ffi

    module = workload(func, target)
    records = db.ms_database.get_top_k(db.ms_database.commit_workload(module), 1 << 30)
    chosen: dict = {}  # the rule the scheduling took
    with Choices() as seen:
        scheduled = {"rule": schedule_kernel(func, device, chosen, rules)}
    rule = chosen.get("main")
    alternatives = variants(seen.seen)
    distinct = {tvm_ffi.structural_hash(scheduled["rule"]["main"])}
    for index, fixed in enumerate(alternatives):
        took: dict = {}
        with Choices(fixed):
            mod = schedule_kernel(func, device, took, rules)
        code = tvm_ffi.structural_hash(mod["main"])
        # another rule took the kernel, or the choice left the code as it was: not built
        if took.get("main") == rule and code not in distinct:
            scheduled[index] = mod
            distinct.add(code)
    builds = {key: (build_kernel(mod, device), mod["main"]) for key, mod in scheduled.items()}
    sch = db.ms_database.query_schedule(module, target=target, workload_name="main")
    if sch is not None:
        tuned = sch.mod["main"].with_attr("target", target)
        builds["tuned"] = (tvm.tirx.build(tvm.IRModule({"main": tuned}), target=target), func)
    # interleaved rounds, the best of each: a machine that slows down for a while (this
    # one's two vCPUs, at times, for seconds) then slows all alike
    best = dict.fromkeys(builds, float("inf"))
    for _ in range(COMPARE_ROUNDS):
        for key, (lib, scheduled) in builds.items():
            best[key] = min(best[key], time_kernel(lib, scheduled, device))
    rule_ms, tuned_ms = best.pop("rule"), best.pop("tuned", None)
    fastest = min(best, key=best.get) if best else None
    choices_ms = best[fastest] if fastest is not None else None
    logger.info("kernel %s on %s: tuned %s ms, rules (%s) %.4f ms, its choices %s %s ms",
                name, device.name, f"{tuned_ms:.4f}" if tuned_ms is not None else "-", rule,
                rule_ms, alternatives[fastest] if fastest is not None else "-",
                f"{choices_ms:.4f}" if choices_ms is not None else "-")
    return {"name": name, "device": device.name, "target": str(target),
            "trials": len(records), "tuned_ms": tuned_ms, "rule_ms": rule_ms, "rule": rule,
            "choices": alternatives[fastest] if fastest is not None else {},
            "choices_ms": choices_ms, "rules_version": RULES_VERSION}


__all__ = ["BUILDER_TIMEOUT_S", "COMPARE_ROUNDS", "RUNNER_TIMEOUT_S", "TuningSummary",
           "compare_kernel", "has_symbolic_shape", "is_scheduled", "run_metaschedule",
           "tune_kernels"]
