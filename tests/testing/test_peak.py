"""The FMA peak kernel computes what it claims: independent FMA chains, none dead."""

import numpy as np
import pytest
import tvm

from tvm_hetero.devices import DeviceSet
from tvm_hetero.testing.peak import fma_kernel


@pytest.mark.parametrize("steps", [0, 1, 3, 200])
def test_each_accumulator_runs_its_own_fma_chain(steps):
    lanes, threads, accumulators = 8, 2, 5
    target = DeviceSet.parse(["cpu"]).devices[0].target
    lib = tvm.tirx.build(fma_kernel(lanes, threads, accumulators), target=tvm.target.Target(target))
    x = np.linspace(0.1, 0.8, lanes).astype("float32")
    out = tvm.runtime.tensor(np.zeros((threads, accumulators, lanes), "float32"), tvm.cpu())
    lib(out, tvm.runtime.tensor(x, tvm.cpu()), steps)
    want = np.repeat((x[None, :] + np.arange(accumulators, dtype="float32")[:, None])[None],
                     threads, axis=0)
    for _ in range(steps):
        want = want * x + x
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
