"""MetaSchedule tuning of a placement's kernels into a database on disk, reused across runs."""

import json
import math
import shutil

import pytest

import tvm_hetero as th
from tvm_hetero.optimize import TUNED
from tvm_hetero.optimize.metaschedule import CHOICES_FILE, KernelTuningDatabase, tune_kernels
from tvm_hetero.testing import max_relative_error, onnx_reference

from tests.helpers.models import zoo


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory):
    """zoo:mlp's kernels on cpu, tuned with one round of real MetaSchedule trials: 4 each."""
    path = tmp_path_factory.mktemp("tuning")
    summary = tune_kernels(zoo("mlp"), "all:cpu", th.DeviceSet.parse(["cpu"]), trials=12,
                           database=str(path), trials_per_iter=4)
    return path, summary


def _copy(database, to):
    """A copy of a tuning directory, to edit its comparisons."""
    shutil.copytree(database, to)
    return to


def test_tuning_records_every_kernel_against_the_rules(tuned_db):
    path, summary = tuned_db
    kernels = {layer.func_name for layer in th.extract_layers(zoo("mlp"))}
    assert summary.tuned == len(kernels) and summary.reused == 0
    assert {c.name for c in summary.choices} == kernels
    for choice in summary.choices:
        assert choice.device == "cpu" and choice.rule_ms > 0
    assert all(c.trials > 0 and c.tuned_ms is not None for c in summary.choices)
    assert (path / "database_tuning_record.json").stat().st_size > 0
    with open(path / CHOICES_FILE) as handle:
        assert len(json.load(handle)["kernels"]) == len(kernels)


def test_a_second_run_reuses_the_database(tuned_db):
    path, _ = tuned_db
    again = tune_kernels(zoo("mlp"), "all:cpu", th.DeviceSet.parse(["cpu"]), trials=12,
                         database=str(path))
    assert again.tuned == 0 and again.reused == len(again.choices) > 0


def test_build_uses_a_tuned_kernel_only_where_it_beat_the_rules(tuned_db, tmp_path):
    path, summary = tuned_db
    model = zoo("mlp")
    devices = th.DeviceSet.parse(["cpu"])
    inputs = model.random_inputs(seed=2)
    want = onnx_reference(model.onnx_model, inputs, model)
    compiled = th.build(model, "all:cpu", devices, tuning_db=str(path))
    tuned_now = {k for k, rule in compiled.stats.rules.items() if rule == TUNED}
    assert tuned_now == {c.name for c in summary.choices if c.use_tuned}
    assert max_relative_error(compiled.run(inputs), want) < 1e-4

    # make every kernel with a tuned schedule "faster than the rules": all of them now take it
    copy = _copy(path, tmp_path / "db")
    data = json.loads((copy / CHOICES_FILE).read_text())
    for choice in data["kernels"].values():
        choice["rule_ms"] = math.inf if choice["tuned_ms"] is not None else choice["rule_ms"]
        choice["choices_ms"] = None  # the rule's variants not measured
    (copy / CHOICES_FILE).write_text(json.dumps(data))
    forced = th.build(model, "all:cpu", devices, tuning_db=KernelTuningDatabase(copy))
    with_schedule = {c.name for c in summary.choices if c.tuned_ms is not None}
    assert {k for k, r in forced.stats.rules.items() if r == TUNED} == with_schedule
    assert max_relative_error(forced.run(inputs), want) < 1e-4


def test_tuning_measures_the_rule_s_choices_and_builds_take_the_fastest(tuned_db, tmp_path):
    from tvm_hetero.optimize.metaschedule import CHOICES_MARGIN

    path, summary = tuned_db
    model = zoo("mlp")
    devices = th.DeviceSet.parse(["cpu"])
    # packed-matmul's register tiles: alternatives measured beside the rule's pick
    with_variants = [c for c in summary.choices if c.choices_ms is not None]
    assert with_variants and all(c.choices_ms > 0 for c in with_variants)
    assert all(c.use_choices == (bool(c.choices) and c.choices_ms is not None
                                 and c.choices_ms < CHOICES_MARGIN * c.rule_ms
                                 and not c.use_tuned) for c in summary.choices)
    # every variant faster than the rule and MetaSchedule: the build takes them
    copy = _copy(path, tmp_path / "db")
    data = json.loads((copy / CHOICES_FILE).read_text())
    forced = {}
    for choice in data["kernels"].values():
        if choice["choices_ms"] is not None:
            if not choice["choices"]:  # the rule's pick was fastest: force its first variant
                choice["choices"] = {"matmul-tile": 1}
            choice["choices_ms"], choice["tuned_ms"] = 0.0, None
            forced[choice["name"]] = choice["choices"]
    (copy / CHOICES_FILE).write_text(json.dumps(data))
    built = th.build(model, "all:cpu", devices, tuning_db=KernelTuningDatabase(copy))
    assert built.stats.tuned_choices == forced
    plain = th.build(model, "all:cpu", devices)
    assert built.stats.rules == plain.stats.rules and not plain.stats.tuned_choices
    inputs = model.random_inputs(seed=2)
    assert max_relative_error(built.run(inputs), plain.run(inputs)) < 1e-4


def test_a_kernel_choice_takes_the_fastest_of_rule_variants_and_metaschedule():
    from tvm_hetero.optimize.metaschedule import KernelChoice

    def choice(tuned, rule, variant, choices=None):
        return KernelChoice("k", "cpu", 1, 4, tuned, rule, "tiled",
                            {"tiled-rows": 1} if choices is None else choices, variant)

    assert choice(1.0, 2.0, 3.0).use_tuned and not choice(1.0, 2.0, 3.0).use_choices
    assert choice(2.0, 3.0, 1.0).use_choices and not choice(2.0, 3.0, 1.0).use_tuned
    assert choice(None, 2.0, 1.0).use_choices and choice(None, 2.0, 1.0).best_ms == 1.0
    assert not choice(None, 1.0, 2.0).use_choices and choice(None, 1.0, 2.0).best_ms == 1.0
    # within the timing noise of the rule: the rule's own picks
    assert not choice(None, 1.0, 0.99).use_choices and choice(None, 1.0, 0.99).best_ms == 1.0
    assert choice(1.0, 2.0, None).use_tuned  # no variants measured
    assert not choice(None, 2.0, 1.0, choices={}).use_choices  # the rule's own picks


def test_kernels_are_tuned_per_target(tuned_db):
    path, _ = tuned_db
    db = KernelTuningDatabase(path)
    layered = th.extract_layers(zoo("mlp"))
    from tvm_hetero.layers.layered import layered_module

    mod = layered_module(zoo("mlp"))
    func = mod[mod.get_global_var(layered[0].func_name)]
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    assert db.has(func, devices["cpu"].tvm_target())
    assert not db.has(func, devices["cpu-generic"].tvm_target())


def test_compile_cli_builds_with_the_tuning_database(tuned_db, tmp_path, capsys):
    from tvm_hetero.cli.main import main

    path, summary = tuned_db
    out = tmp_path / "mlp.so"
    code = main(["compile", "zoo:mlp", "-d", "cpu", "-p", "all:cpu", "-o", str(out),
                 "--tuning-db", str(path), "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and out.exists()
    assert printed["tuned_kernels"] == sum(1 for c in summary.choices if c.use_tuned)
    # --tune-trials with a database that holds every kernel tunes nothing new
    code = main(["compile", "zoo:mlp", "-d", "cpu", "-p", "all:cpu", "-o", str(out),
                 "--tuning-db", str(path), "--tune-trials", "8"])
    assert code == 0 and "0 kernels tuned, 3 reused" in capsys.readouterr().out


def test_comparisons_against_older_rules_are_not_used(tuned_db, tmp_path, caplog):
    from tvm_hetero.optimize import RULES_VERSION

    path, summary = tuned_db
    copy = _copy(path, tmp_path / "db")
    data = json.loads((copy / CHOICES_FILE).read_text())
    for choice in data["kernels"].values():
        choice["rule_ms"] = math.inf
        choice["rules_version"] = RULES_VERSION - 1
    (copy / CHOICES_FILE).write_text(json.dumps(data))
    db = KernelTuningDatabase(copy)
    with caplog.at_level("WARNING", logger="tvm_hetero.build.compile"):
        compiled = th.build(zoo("mlp"), "all:cpu", th.DeviceSet.parse(["cpu"]), tuning_db=db)
    assert TUNED not in compiled.stats.rules.values()
    # said, not silent: the user's tuned kernels are not in this build
    (warning,) = [r.message for r in caplog.records if "another version of the rules" in r.message]
    assert warning.startswith(f"{len(data['kernels'])} kernels of tuning database")
    layers = th.extract_layers(zoo("mlp"))
    from tvm_hetero.layers.layered import layered_module

    mod = layered_module(zoo("mlp"))
    func = mod[mod.get_global_var(layers[0].func_name)]
    assert not db.has(func, th.DeviceSet.parse(["cpu"])["cpu"].tvm_target())  # compared again


def test_kernels_tuned_before_newer_rules_are_compared_again_not_tuned_again(tuned_db, tmp_path,
                                                                            monkeypatch):
    from tvm_hetero.optimize import RULES_VERSION
    from tvm_hetero.optimize.metaschedule import tuner

    path, summary = tuned_db
    copy = _copy(path, tmp_path / "db")
    data = json.loads((copy / CHOICES_FILE).read_text())
    for choice in data["kernels"].values():
        choice["rules_version"] = RULES_VERSION - 1
    (copy / CHOICES_FILE).write_text(json.dumps(data))
    # one kernel's measurements lost (as if the first run had not reached it)
    records = copy / "database_tuning_record.json"
    lines = records.read_text().splitlines()
    records.write_text("".join(line + "\n" for line in lines if json.loads(line)[0] != 0))
    first = json.loads((copy / "database_workload.json").read_text().splitlines()[0])
    unmeasured = data["kernels"][f"{int(first[0]):x}"]["name"]
    sent = []
    monkeypatch.setattr(tuner, "run_metaschedule",
                        lambda kernels, *args: sent.extend(name for name, _, _ in kernels) or 0)
    again = tune_kernels(zoo("mlp"), "all:cpu", th.DeviceSet.parse(["cpu"]), trials=12,
                         database=str(copy))
    assert again.tuned == 3 and again.reused == 0
    # only the kernel without measurements is tuned now
    assert sent == [unmeasured]
    kernels = json.loads((copy / CHOICES_FILE).read_text())["kernels"].values()
    assert all(choice["rules_version"] == RULES_VERSION for choice in kernels)


def test_the_comparison_alternates_and_keeps_the_best_of_each(tuned_db, tmp_path, monkeypatch):
    import tvm_ffi

    from tvm_hetero.optimize.metaschedule import tuner

    path, _ = tuned_db
    copy = _copy(path, tmp_path / "db")
    (copy / CHOICES_FILE).unlink()  # compared again, from the records already there
    # each kernel's timings as a machine that turns slow half-way would give them
    slow_from = tuner.COMPARE_ROUNDS // 2
    seen = []

    def fake_time(lib, func, device, **_):
        kind = next((kind for kind, funcs in scheduled.items()
                     if any(func.same_as(done) for done in funcs)), "tuned")
        seen.append(kind)
        rounds = (seen.count(kind) - 1) % tuner.COMPARE_ROUNDS  # this kernel's rounds
        fast = {"rule": 2.0, "tuned": 1.0, "variant": 3.0}[kind] - 0.01 * (rounds % slow_from)
        return fast * (3.0 if rounds >= slow_from else 1.0)

    scheduled = {"rule": [], "variant": []}  # schedule_kernel's functions, by whose they are
    real_schedule_kernel = tuner.schedule_kernel

    def recording_schedule_kernel(*args, **kwargs):
        from tvm_hetero.optimize.choices import active

        mod = real_schedule_kernel(*args, **kwargs)
        kind = "variant" if active() is not None and active().fixed else "rule"
        scheduled[kind].append(mod["main"])
        return mod

    built = []  # what was compiled: never the same code twice
    real_build_kernel = tuner.build_kernel

    def recording_build_kernel(mod, device):
        built.append(tvm_ffi.structural_hash(mod["main"]))
        return real_build_kernel(mod, device)

    monkeypatch.setattr(tuner, "time_kernel", fake_time)
    monkeypatch.setattr(tuner, "schedule_kernel", recording_schedule_kernel)
    monkeypatch.setattr(tuner, "build_kernel", recording_build_kernel)
    summary = tune_kernels(zoo("mlp"), "all:cpu", th.DeviceSet.parse(["cpu"]), trials=12,
                           database=str(copy))
    # a variant that left the code as the rule wrote it was scheduled, not compiled
    assert len(set(built)) == len(built) < len(scheduled["rule"]) + len(scheduled["variant"])
    tuned = [c for c in summary.choices if c.tuned_ms is not None]
    assert tuned and summary.tuned == len(summary.choices)
    # alternately, not one after the other (the rule's variants in between)
    variants = seen.index("tuned") - 1
    assert variants > 0  # packed-matmul's tiles
    per_kernel = (["rule"] + ["variant"] * variants + ["tuned"]) * tuner.COMPARE_ROUNDS
    assert seen[:len(per_kernel)] == per_kernel
    lowest = 0.01 * (slow_from - 1)
    for choice in tuned:  # the best of the fast rounds, never a slow one
        assert math.isclose(choice.rule_ms, 2.0 - lowest)
        assert math.isclose(choice.tuned_ms, 1.0 - lowest)
        assert choice.choices_ms is None or math.isclose(choice.choices_ms, 3.0 - lowest)


def _fake_tuning(monkeypatch):
    """MetaSchedule and the timing of kernels faked: ``(kernels sent to MetaSchedule, kernels
    timed)``, lists the tune appends to; every kernel keeps the rule at 1 ms."""
    from tvm_hetero.optimize import RULES_VERSION
    from tvm_hetero.optimize.metaschedule import tuner

    sent, compared = [], []
    monkeypatch.setattr(tuner, "run_metaschedule",
                        lambda kernels, *args: sent.extend(name for name, _, _ in kernels) or 0)

    def fake_compare(db, name, func, calls, device, target, rules):
        compared.append(name)
        return {"name": name, "device": device.name, "target": str(target), "trials": 0,
                "tuned_ms": None, "rule_ms": 1.0, "rule": "tiled",
                "rules_version": RULES_VERSION}

    monkeypatch.setattr(tuner, "compare_kernel", fake_compare)
    return sent, compared


def test_winograd_kernels_keep_their_rule_and_are_not_tuned(tmp_path, monkeypatch):
    sent, compared = _fake_tuning(monkeypatch)
    model = zoo("cnn")  # its 16 -> 32 channel 3x3 convolution is Winograd
    kernels = {layer.func_name for layer in th.extract_layers(model)}
    summary = tune_kernels(model, "all:cpu", th.DeviceSet.parse(["cpu"]), trials=8,
                           database=str(tmp_path))
    assert summary.kept_rule == 1
    assert sorted(sent) == sorted(compared) == sorted(kernels - {"fused_conv2d1_add1_relu1"})
    assert summary.tuned == len(kernels) - 1


def test_a_kernel_share_tunes_only_the_heaviest_kernels_heaviest_first(tmp_path, monkeypatch):
    import tvm_ffi

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize import RULES_VERSION
    from tvm_hetero.optimize.metaschedule import tuner

    model = zoo("mlp")
    mod = layered_module(model)
    names = sorted({layer.func_name for layer in th.extract_layers(model)})
    funcs = {name: mod[mod.get_global_var(name)] for name in names}
    # each kernel's time alone under the rules (each is called once): the last one is 80 %
    rule_ms = {names[0]: 1.0, names[1]: 1.5, names[2]: 10.0}

    def fake_time(lib, func, device, **_):
        return next(ms for name, ms in rule_ms.items()
                    if tvm_ffi.structural_equal(funcs[name], lib))

    sent, compared = [], []

    def fake_compare(db, name, func, calls, device, target, rules):
        compared.append(name)
        return {"name": name, "device": device.name, "target": str(target), "trials": 0,
                "tuned_ms": None, "rule_ms": rule_ms[name], "rule": "tiled",
                "rules_version": RULES_VERSION}

    monkeypatch.setattr(tuner, "kernel_for", lambda func, device, **_: (func, func))
    monkeypatch.setattr(tuner, "time_kernel", fake_time)
    monkeypatch.setattr(tuner, "run_metaschedule",
                        lambda kernels, *args: sent.append([name for name, _, _ in kernels]) or 0)
    monkeypatch.setattr(tuner, "compare_kernel", fake_compare)
    devices = th.DeviceSet.parse(["cpu"])
    summary = tune_kernels(model, "all:cpu", devices, trials=8, database=str(tmp_path),
                           kernel_share=0.75)
    assert sent == [[names[2]]] and compared == [names[2]]
    assert summary.tuned == 1 and summary.left_to_rules == 2
    # a larger share later: the next heaviest, heaviest first; the one there is reused
    sent.clear()
    summary = tune_kernels(model, "all:cpu", devices, trials=8, database=str(tmp_path),
                           kernel_share=0.9)
    assert sent == [[names[1]]] and summary.reused == 1 and summary.left_to_rules == 1
    sent.clear()
    summary = tune_kernels(model, "all:cpu", devices, trials=8, database=str(tmp_path))
    assert sent == [[names[0]]] and summary.left_to_rules == 0 and summary.reused == 2


def test_kernels_measured_before_are_compared_again_outside_the_share(tmp_path, monkeypatch):
    import tvm_ffi

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize import RULES_VERSION
    from tvm_hetero.optimize.metaschedule import tuner

    model = zoo("mlp")
    mod = layered_module(model)
    names = sorted({layer.func_name for layer in th.extract_layers(model)})
    funcs = {name: mod[mod.get_global_var(name)] for name in names}
    rule_ms = {names[0]: 1.0, names[1]: 1.5, names[2]: 10.0}  # the share 0.75 takes names[2]

    def name_of(func):
        return next(name for name in names if tvm_ffi.structural_equal(funcs[name], func))

    sent, compared = [], []
    monkeypatch.setattr(tuner, "kernel_for", lambda func, device, **_: (func, func))
    monkeypatch.setattr(tuner, "time_kernel", lambda lib, *_, **__: rule_ms[name_of(lib)])
    monkeypatch.setattr(tuner, "run_metaschedule",
                        lambda kernels, *args: sent.append([name for name, _, _ in kernels]) or 0)

    def fake_compare(db, name, *args):
        compared.append(name)
        return {"name": name, "trials": 4, "tuned_ms": 0.5, "rule_ms": rule_ms[name],
                "rule": "tiled", "rules_version": RULES_VERSION}

    monkeypatch.setattr(tuner, "compare_kernel", fake_compare)
    # an earlier run (a larger share) measured names[0]; no comparison under these rules
    monkeypatch.setattr(KernelTuningDatabase, "has_records",
                        lambda self, func, target: name_of(func) == names[0])
    summary = tune_kernels(model, "all:cpu", th.DeviceSet.parse(["cpu"]), trials=8,
                           database=str(tmp_path), kernel_share=0.75)
    assert sent == [[names[2]]]  # only the share is tuned
    assert sorted(compared) == sorted([names[2], names[0]])  # the measured one compared again
    assert summary.tuned == 2 and summary.left_to_rules == 1


def test_a_kernel_share_out_of_range_is_one_clear_error(tmp_path):
    for share in (0.0, 1.5):  # the CLI's --tune-share: tests/cli/test_bad_inputs.py
        with pytest.raises(th.HeteroError, match=r"share .* must be in \(0, 1\]"):
            tune_kernels(zoo("mlp"), "all:cpu", th.DeviceSet.parse(["cpu"]), trials=4,
                         database=str(tmp_path), kernel_share=share)


def test_kernels_with_shapes_known_only_at_run_time_keep_their_rule(tmp_path, capsys):
    """Compress's output length depends on its condition: its kernels have symbolic shapes,
    which MetaSchedule cannot measure; compile --tune-trials leaves them to the rules."""
    import numpy as np
    import onnx

    from tvm_hetero.cli.main import main
    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.kernel import kernel_for, time_kernel
    from tvm_hetero.testing import onnx_node_case

    proto, inputs, _ = onnx_node_case("test_compress_0")
    path = tmp_path / "compress.onnx"
    onnx.save(proto, str(path))
    out = tmp_path / "compress.so"
    code = main(["compile", str(path), "-d", "cpu", "-p", "all:cpu", "-o", str(out),
                 "--tuning-db", str(tmp_path / "db"), "--tune-trials", "2"])
    printed = capsys.readouterr().out
    assert code == 0 and out.exists()
    assert "0 kernels tuned" in printed
    assert "2 kernels with shapes known only at run time kept their rule" in printed
    compiled = th.load(str(out), th.DeviceSet.parse(["cpu"]))
    np.testing.assert_array_equal(compiled.run(inputs)[0],
                                  np.compress(inputs["condition"], inputs["input"], axis=0))
    # timing such a kernel directly: one clear error that names the way out
    mod = layered_module(th.load_model(proto))
    cpu = th.DeviceSet.parse(["cpu"])["cpu"]
    with pytest.raises(th.ModelError, match="known only at run time.*bounded_kernel"):
        time_kernel(*kernel_for(mod[mod.get_global_var("take")], cpu), cpu)


def test_kernels_of_a_tune_stopped_before_measuring_them_are_tuned_again(tmp_path, monkeypatch):
    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize import RULES_VERSION
    from tvm_hetero.optimize.metaschedule import tuner
    from tvm_hetero.optimize.metaschedule.records import workload

    model = zoo("mlp")
    devices = th.DeviceSet.parse(["cpu"])
    target = devices["cpu"].tvm_target()
    mod = layered_module(model)
    names = sorted({layer.func_name for layer in th.extract_layers(model)})
    db = KernelTuningDatabase(tmp_path)
    for name in names:  # what MetaSchedule writes first, before it measures anything
        db.ms_database.commit_workload(workload(mod[mod.get_global_var(name)], target))
    sent = []
    monkeypatch.setattr(tuner, "run_metaschedule",
                        lambda kernels, *args: sent.extend(name for name, _, _ in kernels) or 0)

    def fake_compare(db, name, func, calls, device, target, rules):
        return {"name": name, "device": device.name, "target": str(target), "trials": 0,
                "tuned_ms": None, "rule_ms": 1.0, "rule": "tiled",
                "rules_version": RULES_VERSION}

    monkeypatch.setattr(tuner, "compare_kernel", fake_compare)
    tune_kernels(model, "all:cpu", devices, trials=8, database=KernelTuningDatabase(tmp_path))
    assert sorted(sent) == names


@pytest.mark.slow  # two sets of builder workers, each importing tvm.s_tir.tensor_intrin
def test_the_pooled_builder_keeps_its_workers_across_batches():
    import tvm
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.metaschedule.builder_pool import PooledBuilder

    mod = layered_module(zoo("mlp"))
    name = th.extract_layers(zoo("mlp"))[-1].func_name
    target = th.DeviceSet.parse(["cpu"])["cpu"].tvm_target()
    kernel = tvm.IRModule({"main": mod[mod.get_global_var(name)].with_attr("global_symbol",
                                                                            "main")})
    builder = PooledBuilder(max_workers=1, timeout_sec=300, batches_per_pool=2)
    try:
        for _ in range(3):
            results = builder.build([BuilderInput(kernel, target)] * 2)
            assert [r.error_msg for r in results] == [None, None]
            assert all(r.artifact_path for r in results)
    finally:
        builder.shutdown()
    assert builder.pools_started == 2  # batches 1-2 on the first workers, 3 on fresh ones


def _embedding_model():
    """int64 token ids -> Gather from a [64, 16] table -> MatMul [16, 32]: the frontend guards
    the ids with an index-check kernel written already scheduled."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
         helper.make_node("MatMul", ["rows", "w"], ["out"])], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 32])],
        [numpy_helper.from_array(rng.standard_normal((64, 16)).astype("float32"), "table"),
         numpy_helper.from_array(rng.standard_normal((16, 32)).astype("float32"), "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(proto)
    return th.load_model(proto, name="embedding")


def test_kernels_written_scheduled_are_not_tuned_and_unsearchable_ones_keep_their_rule(
        tmp_path, monkeypatch):
    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.metaschedule import tuner

    model = _embedding_model()
    mod = layered_module(model)
    funcs = {layer.func_name: mod[mod.get_global_var(layer.func_name)]
             for layer in th.extract_layers(model)}
    guards = {name for name, func in funcs.items() if tuner.is_scheduled(func)}
    assert len(guards) == 1
    # MetaSchedule's design space generation raises on the index check: alone, it would fail
    # the whole tune; left out, nothing is tuned and MetaSchedule is not started
    target = th.DeviceSet.parse(["cpu"])["cpu"].tvm_target()
    (guard,) = guards
    assert tuner.run_metaschedule([(guard, funcs[guard], 1)], target, 8, 8, 0,
                                  KernelTuningDatabase(tmp_path / "alone"), 2) == 1
    sent, compared = _fake_tuning(monkeypatch)
    summary = tune_kernels(model, "all:cpu", th.DeviceSet.parse(["cpu"]), trials=8,
                           database=str(tmp_path / "db"))
    assert summary.as_written == 1
    assert sorted(sent) == sorted(compared) == sorted(set(funcs) - guards)


def test_the_import_machinery_s_frames_find_their_module_without_a_rescan():
    """`import_tensor_intrinsics` records the frozen importlib files in ``inspect``'s file
    cache, so TVMScript's ``inspect.stack()`` during the intrinsics' import finds their module
    at once instead of rescanning ``sys.modules`` per frame (that import: 22.7 s -> 5.1 s)."""
    import importlib._bootstrap as bootstrap
    import inspect
    import sys

    from tvm_hetero.optimize.metaschedule.builder_pool import import_tensor_intrinsics

    import_tensor_intrinsics()
    assert inspect.getmodule(bootstrap._find_and_load.__code__) is bootstrap
    assert "tvm.s_tir.tensor_intrin.x86" in sys.modules


def test_comparisons_are_kept_per_table_and_a_build_takes_only_its_table_s(tmp_path,
                                                                          monkeypatch):
    """Two tables compared in one process (one database) never mix: each table's
    comparisons are kept beside the other's, and a build under a table takes only its own."""
    from tvm_hetero import optimize
    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize import RULES_VERSION
    from tvm_hetero.optimize.metaschedule import tuner

    model = zoo("mlp")
    devices = th.DeviceSet.parse(["cpu"])
    target = devices["cpu"].tvm_target()
    other = optimize.default_table().with_fast_exp(False)  # schedules the MLP alike
    tiles = {"matmul-tile": 1}

    def fake_compare(db, name, func, calls, device, target, rules):
        # under `other` packed-matmul's second register tile "measured" fastest
        faster = not rules.is_default and name.startswith("fused_matmul_")
        return {"name": name, "device": device.name, "target": str(target), "trials": 0,
                "tuned_ms": None, "rule_ms": 1.0 if rules.is_default else 2.0, "rule": "x",
                "choices": tiles if faster else {}, "choices_ms": 0.5 if faster else None,
                "rules_version": RULES_VERSION}

    monkeypatch.setattr(tuner, "run_metaschedule", lambda kernels, *args: 0)
    monkeypatch.setattr(tuner, "compare_kernel", fake_compare)
    db = KernelTuningDatabase(tmp_path)
    first = tune_kernels(model, "all:cpu", devices, trials=8, database=db)
    second = tune_kernels(model, "all:cpu", devices, trials=8, database=db, rules=other)
    assert first.tuned == second.tuned == 3 and second.reused == 0  # compared under each
    assert {c.rule_ms for c in first.choices} == {1.0}
    assert {c.rule_ms for c in second.choices} == {2.0}
    again = tune_kernels(model, "all:cpu", devices, trials=8,
                         database=KernelTuningDatabase(tmp_path), rules=other)
    assert again.tuned == 0 and again.reused == 3  # kept on disk, under that table
    assert len(KernelTuningDatabase(tmp_path)) == 6
    mod = layered_module(model)
    func = mod[mod.get_global_var("fused_matmul_add_relu")]
    assert db.has(func, target) and db.has(func, target, other)
    assert not db.has(func, target, optimize.default_table().without("tiled"))
    # a build takes the comparisons of its own table only
    assert th.build(model, "all:cpu", devices, tuning_db=db, rules=other).stats.tuned_choices \
        == {"fused_matmul_add_relu": tiles}
    assert th.build(model, "all:cpu", devices, tuning_db=db).stats.tuned_choices == {}
