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

for family, kind, rules in optimize.table_rows()[:7]:
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


# At run time: first for (cpu, pooling). In the package itself a rule is one file under
# tvm_hetero/optimize/cpu/ and one line in optimize/table.py's default_table().
optimize.register_rule("cpu", "pooling", ParallelPooling())

######################################################################
# Build with it
# -------------
# Only the two pooling layers of the CNN reach the rule; its output is unchanged.
model = th.load_model("zoo:cnn")
devices = th.DeviceSet.parse(["cpu"])
inputs = model.random_inputs()
reference = th.build(model, "all:cpu", devices, optimize=False).run(inputs)
compiled = th.build(model, "all:cpu", devices)
print(f"rule used {len(used)} times (layers: "
      f"{[l.name for l in th.extract_layers(model) if l.kind == 'pooling']})")
assert used == ["llvm", "llvm"]
error = max_relative_error(compiled.run(inputs), reference)
print(f"relative error against TVM's default loops: {error:.1e}")
assert error < 1e-5

optimize.reset_table()  # back to the defaults

######################################################################
# Or pass a table
# ---------------
# A table is a value (``optimize.RuleTable``): derive one from the defaults and give it to the
# build, as TVM's dlight takes its rules as a list. The active table, which builds given no
# table use, is left as it is.
used.clear()
table = optimize.default_table().with_rule("cpu", "pooling", ParallelPooling())
compiled = th.build(model, "all:cpu", devices, rules=table)
assert used == ["llvm", "llvm"]
assert list(compiled.stats.rules.values()).count("parallel-pooling") == 2
assert "parallel-pooling" not in [rule.name for rule in optimize.rules_for("cpu", "pooling")]
print("with the table passed:", sorted(set(compiled.stats.rules.values()) - {None}))

######################################################################
# Summary
# -------
# ``optimize.register_rule(family, kind, rule)`` puts a rule first for one (device kind, layer
# kind) pair it serves in the active table; every build, every measured candidate and every
# profile given no table of its own then uses it. ``th.build(..., rules=table)`` uses the table
# given (``default_table()`` and its ``with_rule``, ``without``, ``with_fast_exp`` variants).
