"""Expected: the ``dlight.gpu.Fallback`` rule's schedule of the kernel of
``test_dlight_gpu_fallback`` (``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(x: T.Buffer((4, 64), "float32"), compute: T.Buffer((4, 64), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["exp"]})
    # with T.sblock("root"):
    for ax0_ax1_fused_0 in T.thread_binding(1, thread="blockIdx.x"):
        for ax0_ax1_fused_1 in T.thread_binding(1024, thread="threadIdx.x"):
            with T.sblock("compute"):
                v0 = T.axis.spatial(4, (ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1) // 64)
                v1 = T.axis.spatial(64, (ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1) % 64)
                T.where(ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1 < 256)
                T.reads(x[v0, v1])
                T.writes(compute[v0, v1])
                compute[v0, v1] = T.exp(x[v0, v1])
