"""
Add your own optimization rule
==============================

Every layer's kernel is scheduled by the rules of its device kind and layer kind, looked up in a
table (``tvm-hetero optimizations`` prints it; ``tvm_hetero/optimize/table.py`` declares it). A
rule is a class deriving from ``optimize.Rule``: a name, a description, the layer kinds and
device families it serves, and ``apply(func, target)`` returning a scheduled PrimFunc, or None
to pass the kernel to the next rule. Here we add a rule for pooling layers on CPUs, check that
it is used only for them, and that the model still computes what it computed.
"""

######################################################################
# The table
# ---------
from tvm import s_tir

import tvm_hetero as th
from tvm_hetero import optimize
from tvm_hetero.testing import max_relative_error

for family, kind, rules in optimize.default_table().rows()[:7]:
    print(f"{family:<5} {kind:<14} {', '.join(rules)}")

######################################################################
# A rule
# ------
# Pooling kernels: parallelize the outermost loop of the pooling block (after inlining its
# padding), nothing else. ``s_tir.Schedule`` is TVM's scheduling API.
used = []


class ParallelPooling(optimize.Rule):
    name = "parallel-pooling"
    description = "parallel outer loop of pooling blocks"
    kinds = ("pooling",)
    families = ("cpu",)

    def apply(self, func, target):
        sch = s_tir.Schedule(func)
        for block in sch.get_output_blocks(sch.get_sblock("root")):
            loops = sch.get_loops(block)
            if loops:
                sch.parallel(loops[0])
        used.append(target.kind.name)
        return sch.mod["main"]


# A table is a value (``optimize.RuleTable``): derive one from the defaults with the rule first
# for (cpu, pooling), as TVM's dlight takes its rules as a list. In the package itself a rule is
# one file under tvm_hetero/optimize/cpu/ and one line in optimize/table.py's default_table().
table = optimize.default_table().with_rule("cpu", "pooling", ParallelPooling())

######################################################################
# Build with it
# -------------
# Only the two pooling layers of the CNN reach the rule; its output is unchanged.
model = th.load_model("zoo:cnn")
devices = th.DeviceSet.parse(["cpu"])
inputs = model.random_inputs()
reference = th.build(model, "all:cpu", devices, optimize=False).run(inputs)
compiled = th.build(model, "all:cpu", devices, rules=table)
print(f"rule used {len(used)} times (layers: "
      f"{[l.name for l in th.extract_layers(model) if l.kind == 'pooling']})")
assert used == ["llvm", "llvm"]
assert list(compiled.stats.rules.values()).count("parallel-pooling") == 2
error = max_relative_error(compiled.run(inputs), reference)
print(f"relative error against TVM's default loops: {error:.1e}")
assert error < 1e-5

######################################################################
# Only where it is given
# ----------------------
# There is no process-wide table: a build given no table uses the default rules.
used.clear()
compiled = th.build(model, "all:cpu", devices)
assert used == [] and "parallel-pooling" not in compiled.stats.rules.values()
print("without the table:", sorted(set(compiled.stats.rules.values()) - {None}))

######################################################################
# Summary
# -------
# ``optimize.default_table().with_rule(family, kind, rule)`` puts a rule first for one (device
# kind, layer kind) pair it serves; ``th.build(..., rules=table)`` (and ``th.tune_kernels``,
# ``api.compile_model``) schedule with the table given, the default rules where none is
# (``default_table()`` and its ``with_rule``, ``without``, ``with_fast_exp`` variants).
