import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_hetero as th
from tvm_hetero.build.annotate import WEIGHTS_FUNC
from tvm_hetero.prepare import prepare

from tests.helpers.models import zoo

TO_VDEVICE = tvm.ir.Op.get("relax.to_vdevice")
rng = np.random.default_rng(0)
W1 = rng.standard_normal((16, 32)).astype("float32")
W2 = rng.standard_normal((32, 8)).astype("float32")


def two_layer_module():
    """x -> matmul(W1)+relu -> matmul(W2): two layers after prepare."""
    x = relax.Var("x", relax.TensorType((4, 16), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.matmul(x, relax.const(W1))))
            y = bb.emit_output(relax.op.matmul(h, relax.const(W2)))
        bb.emit_func_output(y)
    return prepare(bb.get())


def count_copies(mod):
    found = []

    @relax.expr_functor.visitor
    class Visitor(relax.PyExprVisitor):
        def visit_call_(self, call):
            if call.op.same_as(TO_VDEVICE):
                found.append(call)
            super().visit_call_(call)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            Visitor().visit_expr(func)
    return len(found)


def expected_module(before, vdevs):
    """What AnnotateDevice must produce for {matmul_0: cpu, matmul_1: cpu-generic}, written
    out by hand (with the module's own VDevice objects: targets compare by identity)."""
    (gv_first,) = [gv for gv in before.get_global_vars() if gv.name_hint == "fused_matmul_relu"]
    (gv_second,) = [gv for gv in before.get_global_vars() if gv.name_hint == "matmul1"]
    out_mod = tvm.IRModule({gv: f for gv, f in before.functions_items()
                            if gv.name_hint != "main"})
    out_mod[gv_first] = before[gv_first].with_attr("target", vdevs[0].target)
    out_mod[gv_second] = before[gv_second].with_attr("target", vdevs[1].target)
    bb = relax.BlockBuilder(out_mod)
    x = relax.Var("x", relax.TensorType((4, 16), "float32", vdevs[0]))
    main = before["main"]
    consts = [arg for b in main.body.blocks[0].bindings for arg in b.value.args[1].fields
              if isinstance(arg, tvm.ir.GenericConst)]
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            h = bb.emit(relax.call_tir(gv_first, [x, consts[0]],
                                       relax.TensorType((4, 32), "float32", vdevs[0])))
            h1 = bb.emit(relax.op.to_vdevice(h, vdevs[1]))  # activation crosses once
            w2 = bb.emit(relax.op.to_vdevice(consts[1], vdevs[1]))  # weight read on device 1
            y = bb.emit_output(relax.call_tir(gv_second, [h1, w2],
                                              relax.TensorType((4, 8), "float32", vdevs[1])))
        bb.emit_func_output(y)
    expected = bb.get()
    expected.update_global_info("vdevice", vdevs)
    return expected


def test_structural_before_expected(cpu_devices):
    before = two_layer_module()
    assert [l.name for l in th.extract_layers(before)] == ["matmul_0", "matmul_1"]
    placement = th.Placement({"matmul_0": "cpu", "matmul_1": "cpu-generic"})
    after = th.AnnotateDevice(placement, cpu_devices)(before)
    vdevs = list(after.global_infos["vdevice"])
    assert [str(v.target) for v in vdevs] == [str(d.tvm_target()) for d in cpu_devices]
    assert [int(v.vdevice_id) for v in vdevs] == [0, 1]
    tvm.ir.assert_structural_equal(after["main"], expected_module(before, vdevs)["main"])
    for name, device in [("fused_matmul_relu", "cpu"), ("matmul1", "cpu-generic")]:
        target = after[after.get_global_var(name)].attrs["target"]
        assert str(target) == str(cpu_devices[device].tvm_target())


def test_input_module_is_not_modified(cpu_devices):
    before = two_layer_module()
    text = before.script(show_meta=True)
    placement = th.Placement({"matmul_0": "cpu-generic", "matmul_1": "cpu"})
    th.AnnotateDevice(placement, cpu_devices, lift_weights=True)(before)
    assert before.script(show_meta=True) == text
    assert "vdevice" not in before.global_infos


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet", "transformer"])
def test_all_on_one_device_adds_no_copy(name, cpu_devices):
    layered = prepare(zoo(name).mod)
    layers = th.extract_layers(layered)
    for device in cpu_devices.names:
        after = th.AnnotateDevice(th.Placement.all_on(layers, device), cpu_devices)(layered)
        assert count_copies(after) == 0
        after = relax.transform.RealizeVDevice()(after)
        assert count_copies(after) == 0


def test_copies_are_exactly_the_cross_device_edges(cpu_devices):
    layered = prepare(zoo("resnet").mod)
    layers = th.extract_layers(layered)
    names = cpu_devices.names
    placement = th.Placement({l.name: names[i % 2] for i, l in enumerate(layers)})
    after = th.AnnotateDevice(placement, cpu_devices, lift_weights=True)(layered)
    # one copy per (producer, consuming device) pair that crosses devices
    crossing = {(p, placement[l.name]) for l in layers for p in l.predecessors
                if placement[p] != placement[l.name]}
    assert count_copies(tvm.IRModule({"main": after["main"]})) == len(crossing)
    # weights read on cpu-generic are lifted out of main, copied once by hetero_weights()
    lifted = len(after["main"].params) - 1
    assert lifted > 0 and count_copies(tvm.IRModule({"w": after[WEIGHTS_FUNC]})) == lifted


def test_shared_kernel_on_two_devices_is_duplicated_per_target(cpu_devices):
    layered = prepare(zoo("resnet").mod)
    layers = {l.name: l for l in th.extract_layers(layered)}
    # conv2d_5 and conv2d_7, the last two blocks' second convolutions (with the residual add),
    # are the same computation: one PrimFunc
    assert layers["conv2d_5"].func_name == layers["conv2d_7"].func_name
    assignment = {name: "cpu" for name in layers}
    assignment["conv2d_7"] = "cpu-generic"
    after = th.AnnotateDevice(th.Placement(assignment), cpu_devices)(layered)
    func = layers["conv2d_5"].func_name
    targets = {str(f.attrs["target"]) for gv, f in after.functions_items()
               if gv.name_hint.startswith(func) and isinstance(f, tvm.tirx.PrimFunc)}
    assert len(targets) == 2


def test_errors(cpu_devices):
    layered = two_layer_module()
    with pytest.raises(th.PlacementError, match="missing 1 layer"):
        th.AnnotateDevice(th.Placement({"matmul_0": "cpu"}), cpu_devices)(layered)
    with pytest.raises(th.PlacementError, match="unknown layer"):
        th.AnnotateDevice(th.Placement({"matmul_0": "cpu", "matmul_1": "cpu", "x": "cpu"}),
                          cpu_devices)(layered)
    with pytest.raises(th.PlacementError, match="unknown device"):
        th.AnnotateDevice(th.Placement({"matmul_0": "cpu", "matmul_1": "tpu"}),
                          cpu_devices)(layered)
    with pytest.raises(th.PlacementError, match="layered module"):
        th.AnnotateDevice(th.Placement({"matmul_0": "cpu"}), cpu_devices)(zoo("mlp").mod)
