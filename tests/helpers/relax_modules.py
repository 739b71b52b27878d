"""Small Relax modules built by code for the preparation passes' tests, and the CPU targets
they prepare for."""

import numpy as np
import tvm
from tvm import relax

import tvm_hetero as th
from tvm_hetero.prepare.legalize import conv2d_legalizer
from tvm_hetero.relax_ir import main_bindings

AVX2 = {"kind": "llvm", "mcpu": "haswell"}
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
ZNVER4 = {"kind": "llvm", "mcpu": "znver4"}
GENERIC = {"kind": "llvm", "mcpu": "x86-64"}


def random_weights(*shape, seed=0):
    """Seeded standard normal float32 weights of `shape`."""
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def relax_module(params, body):
    """A one-function module: ``body(builder, *params)`` emits the dataflow block's bindings
    and returns the output expression."""
    builder = relax.BlockBuilder()
    variables = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in params]
    with builder.function("main", variables):
        with builder.dataflow():
            out = builder.emit_output(body(builder, *variables))
        builder.emit_func_output(out)
    return builder.get()


def conv2d(data, weight, **attrs):
    """``relax.op.nn.conv2d``; a NumPy `weight` becomes a constant."""
    return relax.op.nn.conv2d(data, relax.const(weight) if isinstance(weight, np.ndarray)
                              else weight, **attrs)


def device_set(*targets):
    """A device set of one device per target (JSON dicts), named d0, d1, ..."""
    import json

    return th.DeviceSet.parse([f"d{i}={json.dumps(t)}" for i, t in enumerate(targets)])


def conv_attrs(mod):
    """The attributes of each convolution in `mod`'s main."""

    return [(str(b.value.attrs.data_layout), [int(v) for v in b.value.ty.shape])
            for b in main_bindings(mod) if isinstance(b.value, relax.Call)
            and getattr(b.value.op, "name", "") == "relax.nn.conv2d"]


def run_legalized(mod, inputs, config=None):
    """`mod`'s outputs for `inputs`: legalized (blocked convolutions by our legalizer under
    `config`) and built for the host."""
    legalize = {"relax.nn.conv2d": conv2d_legalizer(config)} if config else None
    executable = tvm.compile(relax.transform.LegalizeOps(legalize)(mod), target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def op_counts(mod) -> dict:
    """How many calls of each Relax op `mod`'s main makes."""
    from collections import Counter

    return Counter(b.value.op.name for b in main_bindings(mod) if isinstance(b.value, relax.Call)
                   and isinstance(b.value.op, tvm.ir.Op))


def conv_then_dropout():
    """A 3 x 3 convolution of 64 channels (302 MFLOP) and an inference dropout after it."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 64, 64), "float32"))  # 302 MFLOP
    weight = relax.const(np.ones((64, 64, 3, 3), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            conv = builder.emit(relax.op.nn.conv2d(x, weight, padding=1))
            dropped = builder.emit(relax.op.nn.dropout(conv, 0.5))
            out = builder.emit_output(relax.TupleGetItem(dropped, 0))
        builder.emit_func_output(out)
    return builder.get()
