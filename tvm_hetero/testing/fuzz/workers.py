"""The functions run inside ``tvm.support.popen_pool`` workers: one build-and-run of a graph
by ours (:func:`run_ours`) or by plain TVM (:func:`run_plain_tvm`), each an :class:`Outcome`.

Ours is observed through ``tvm_hetero.build``'s public hooks (:class:`BuildObserver`), never
by patching it: ``build(stats=...)`` fills the rules as scheduling chooses them (known when
lowering or code generation then fails), an extra pass stops a rules-only build once its
kernels are scheduled, and the ``tvm_hetero.optimize`` logger names the rules that raised.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np

from .outcomes import DEVICES, Outcome, compare, one_line


class _RulesOnly(Exception):
    """Raised by the rules-only build's extra pass: the kernels are scheduled, nothing more is
    built."""


class BuildObserver:
    """Inside a worker: what one ``tvm_hetero.build`` chooses, through its public hooks.

    Give ``build`` ``stats=observer.stats`` and ``extra_passes=observer.passes()`` inside
    ``with observer:``.

    Attributes
    ----------
    stats : tvm_hetero.build.compile.BuildStats
        Filled by the build in place: ``stats.rules`` (kernel -> rule) is complete once
        scheduling is done, whatever fails after.
    rule_errors : list of str
        The warnings of rules that raised on a kernel and were passed over.
    rules_only : bool
        :meth:`passes` stops the build once its kernels are scheduled (no lowering, no code
        generation); :attr:`stopped` then says the build stopped there.
    """

    def __init__(self, rules_only: bool = False):
        from ...build.compile import BuildStats

        self.stats = BuildStats()
        self.rule_errors: list[str] = []
        self.rules_only = rules_only
        self.stopped = False
        self._handler = None

    @property
    def rules(self) -> dict:
        return self.stats.rules

    def passes(self) -> list:
        """The extra passes for ``build(extra_passes=...)``: with `rules_only`, one that
        raises once scheduling is done."""
        if not self.rules_only:
            return []
        import tvm

        observer = self

        @tvm.transform.module_pass(opt_level=0, name="tvm_hetero.testing.StopAfterScheduling")
        def stop(mod, _ctx):
            observer.stopped = True
            raise _RulesOnly()

        return [stop]

    def __enter__(self):
        observer = self

        class Handler(logging.Handler):
            def emit(self, record):
                message = record.getMessage()
                if message.startswith("rule "):
                    observer.rule_errors.append(message[:200])

        self._handler = Handler(logging.WARNING)
        logging.getLogger("tvm_hetero.optimize").addHandler(self._handler)
        return self

    def __exit__(self, *exc):
        logging.getLogger("tvm_hetero.optimize").removeHandler(self._handler)
        return False


def _kernel_cache(progress_path: str | None):
    """A KernelCache timing each kernel's code generation (and writing the kernel it starts
    to `progress_path`, so that the kernel of a hang is known)."""
    from ...build.compile import KernelCache

    class TimedKernelCache(KernelCache):
        def __init__(self):
            super().__init__()
            self.seconds: dict[str, float] = {}

        def get(self, gv, func, target):
            if progress_path:
                with open(progress_path, "w") as file:
                    file.write(gv.name_hint)
            start = time.perf_counter()
            try:
                return super().get(gv, func, target)
            finally:
                self.seconds[gv.name_hint] = self.seconds.get(gv.name_hint, 0.0) + \
                    time.perf_counter() - start

    return TimedKernelCache()


def _placement(model, devices: tuple[str, ...], seed: int):
    """A random placement over `devices` (both used when there are two layers or more) and a
    random device order, for the layers a build for that set has."""
    import tvm_hetero as th
    from tvm_hetero.prepare import PrepareConfig

    from ..models import random_placement

    rng = np.random.default_rng(seed)
    order = list(devices) if rng.integers(2) else list(devices[::-1])
    device_set = th.DeviceSet.parse(order)
    layers = th.extract_layers(model, PrepareConfig.for_devices(device_set))
    placement = random_placement(layers, list(devices), rng)
    used = set(placement.assignment.values())
    if len(layers) >= 2 and len(used) < 2:  # move one layer to the other device
        layer = layers[int(rng.integers(len(layers)))].name
        other = next(d for d in devices if d not in used)
        placement = th.Placement({**placement.assignment, layer: other})
    return placement, order


def run_ours(model_bytes: bytes, inputs: dict, want: list, run: str, seed: int,
             strict_rules: bool = False, rules_only: bool = False,
             progress_path: str | None = None) -> Outcome:
    """tvm_hetero's path: load, build (`run`: ``cpu`` all on cpu; ``placed`` a random
    placement seeded by `seed`, through a timing kernel cache), run, compare with `want`.
    With `rules_only` the build stops once its kernels are scheduled: a ``pass`` naming the
    rules.

    Never raises: every failure is an :class:`Outcome`.
    """
    import onnx

    from ...optimize import STRICT_RULES_ENV

    os.environ[STRICT_RULES_ENV] = "1" if strict_rules else "0"
    import tvm_hetero as th
    from tvm_hetero.errors import ModelError

    try:
        model = th.load_model(onnx.load_from_string(model_bytes), name=f"fuzz_{seed}")
    except ModelError as err:
        return Outcome("refused", one_line(err))
    except Exception as err:  # noqa: BLE001 (any failure is an outcome)
        return Outcome("crash", "load: " + one_line(err))
    with BuildObserver(rules_only) as observer:
        hooks = dict(stats=observer.stats, extra_passes=observer.passes())
        cache = None
        start = time.perf_counter()
        try:
            if run == "cpu":
                compiled = th.build(model, "all:cpu", ["cpu"], **hooks)
            else:
                placement, order = _placement(model, DEVICES, seed)
                cache = _kernel_cache(progress_path)
                compiled = th.build(model, placement, order, kernel_cache=cache, **hooks)
        except Exception as err:  # noqa: BLE001
            if observer.stopped:
                outcome = Outcome("pass")
            elif isinstance(err, ModelError):  # a clear refusal, wherever it comes
                outcome = Outcome("refused", "build: " + one_line(err))
            else:
                outcome = Outcome("crash", "build: " + one_line(err))
            outcome.rules = dict(observer.rules)
            outcome.rule_errors = list(observer.rule_errors)
            return outcome
        build_s = time.perf_counter() - start
    outcome = Outcome("pass", build_s=build_s, rules=dict(compiled.stats.rules),
                      rule_errors=list(observer.rule_errors))
    if cache is not None:  # BuildStats' own per-kernel times where it has them
        outcome.kernel_s = dict(getattr(compiled.stats, "kernel_compile_s", None)
                                or cache.seconds)
    try:
        got = compiled.run({spec.name: inputs[spec.source_name or spec.name]
                            for spec in model.inputs})
    except Exception as err:  # noqa: BLE001
        outcome.status, outcome.detail = "crash", "run: " + one_line(err)
        return outcome
    return _compared(outcome, got, want)


def run_plain_tvm(model_bytes: bytes, inputs: dict, want: list) -> Outcome:
    """Plain TVM: ``from_onnx`` + ``tvm.compile`` for llvm + the Relax VM on the CPU."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load_from_string(model_bytes)
    init_names = {init.name for init in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in init_names]
    try:
        mod = from_onnx(model, shape_dict={n: list(inputs[n].shape) for n in names},
                        dtype_dict={n: str(inputs[n].dtype) for n in names},
                        keep_params_in_input=False)
    except Exception as err:  # noqa: BLE001
        return Outcome("refused", one_line(err))
    start = time.perf_counter()
    try:
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    except Exception as err:  # noqa: BLE001
        return Outcome("crash", "build: " + one_line(err))
    outcome = Outcome("pass", build_s=time.perf_counter() - start)
    try:
        result = vm["main"](*[tvm.runtime.tensor(inputs[n], tvm.cpu()) for n in names])
        got = _flatten(result)
    except Exception as err:  # noqa: BLE001
        outcome.status, outcome.detail = "crash", "run: " + one_line(err)
        return outcome
    return _compared(outcome, got, want)


def _compared(outcome: Outcome, got: list, want: list) -> Outcome:
    """`outcome` with `got` compared with `want`: its error, and a mismatch where they
    differ."""
    outcome.error, detail, outcome.output = compare(got, want)
    if detail:
        outcome.status, outcome.detail = "mismatch", detail
    return outcome


def _flatten(value) -> list[np.ndarray]:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("Array", "List"):
        return [a for item in value for a in _flatten(item)]
    return [np.asarray(value)]


__all__ = ["BuildObserver", "run_ours", "run_plain_tvm"]
