"""``reduction-chains`` with an epilogue block that reads no output of the reduction: the onnx
package's LayerNormalization written out over the last axis (E[x^2] - E[x]^2, the mean of x
from another kernel), right against the case's own outputs."""

import warnings

import numpy as np
import pytest

import tvm_hetero as th


def _node_case(name):
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in node_cases.collect_testcases() if c.name == name]
    assert cases, name
    return cases[0]


@pytest.mark.parametrize("name", ["test_layer_normalization_4d_axis3_expanded",
                                  "test_layer_normalization_default_axis_expanded"])
@pytest.mark.parametrize("device", ["cpu", "cpu-generic"])
def test_an_epilogue_reading_another_input_stays_right(name, device):
    case = _node_case(name)
    inputs, outputs = case.data_sets[0]
    feed = {value.name: array for value, array in zip(case.model.graph.input, inputs)}
    model = th.load_model(case.model, input_shapes={k: v.shape for k, v in feed.items()})
    compiled = th.build(model, th.Placement.all_on(th.extract_layers(model), device), [device])
    assert "reduction-chains" in compiled.stats.rules.values()
    got = compiled.run({s.name: feed[s.source_name or s.name] for s in model.inputs})
    assert not np.isnan(got[0]).any()
    np.testing.assert_allclose(got[0], outputs[0], rtol=1e-4, atol=1e-5)
