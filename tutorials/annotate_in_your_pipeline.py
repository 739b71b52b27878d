"""
AnnotateDevice in your own pass pipeline
========================================

``tvm_hetero.build`` is one way to compile a placed model. Compiler engineers who keep their own
Relax pipeline can use the pass alone: ``prepare`` lowers a model to its layered form (every
``call_tir`` of ``main`` is one fused layer), ``AnnotateDevice`` gives each layer its device, and
TVM's own passes do the rest.
"""

######################################################################
# A model and its layers
# ----------------------
import numpy as np
import tvm
from tvm import relax

import tvm_hetero as th

model = th.load_model("zoo:mlp")
layered = th.prepare(model.mod)  # legalize + FuseOps + FuseTIR, the input is untouched
layers = th.extract_layers(layered)
print([layer.name for layer in layers])

######################################################################
# Annotate
# --------
# The first layer on the host CPU, the others on a generic x86-64. The pass registers one
# VDevice per device used, gives every layer's output and kernel its device, and inserts a
# ``to_vdevice`` copy on each edge that crosses devices. With ``lift_weights=False`` (the
# default) the module is self-contained: weights needed on the second device are copied by
# ``main`` itself.
devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
placement = th.Placement({layers[0].name: "cpu", layers[1].name: "cpu-generic",
                          layers[2].name: "cpu-generic"})
annotated = th.AnnotateDevice(placement, devices)(layered)
print(annotated["main"].script(show_meta=False))

######################################################################
# The rest of the pipeline is TVM's
# ---------------------------------
# One caveat of TVM 0.27: ``tvm.compile`` builds every LLVM kernel with ONE target even when
# their ``target`` attributes differ. Here both devices are LLVM, so this plain build runs
# correctly but with one code generator; ``tvm_hetero.build`` links a library per target.
annotated = relax.transform.RealizeVDevice()(annotated)
with tvm.target.Target(devices["cpu"].target):
    executable = tvm.compile(annotated, relax_pipeline=relax.get_pipeline("default"))
vm = relax.VirtualMachine(executable, devices.runtime_devices())
x = model.random_inputs()["input"]
out = vm["main"](tvm.runtime.tensor(x, devices["cpu"].runtime_device())).numpy()

reference = th.build(model, "all:cpu", devices).run([x])[0]
print("max abs difference to the single-device build:", float(np.abs(out - reference).max()))
assert np.allclose(out, reference, rtol=1e-4, atol=1e-5)

######################################################################
# Summary
# -------
# ``prepare`` -> ``AnnotateDevice(placement, devices)`` -> ``RealizeVDevice`` -> your passes.
# Use ``tvm_hetero.build`` when devices share a target kind (two LLVM targets) or when weights
# should be copied once rather than per call (``lift_weights=True``).
