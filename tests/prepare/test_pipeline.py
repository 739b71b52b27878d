"""The preparation pipeline (``tvm_hetero/prepare/pipeline.py``): it does not modify its input, and
a prepared module is detected as layered."""

import tvm_hetero as th
from tvm_hetero.prepare import prepare
from tvm_hetero.relax_ir import is_layered


def test_prepare_does_not_modify_its_input_and_is_detected():
    model = th.load_model("zoo:cnn")
    before = model.mod.script()
    layered = prepare(model.mod)
    assert model.mod.script() == before
    assert is_layered(layered) and not is_layered(model.mod)
    assert [l.name for l in th.extract_layers(layered)] == \
        [l.name for l in th.extract_layers(model.mod)]
