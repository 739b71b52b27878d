"""What a target has (``tvm_hetero/target.py``): AVX2 and AVX-512 targets get their own vector
lanes, registers and caches, and the matmul tiles that follow from them."""


from tests.helpers.kernels import llvm_target


def test_avx2_and_avx512_targets_get_their_own_lanes_registers_caches_and_tiles():
    from tvm_hetero.optimize.cpu.packed_matmul import matmul_tile
    from tvm_hetero.optimize.cpu.tiled import tiled_tile
    from tvm_hetero.target import CpuTraits, cpu_traits

    avx2, avx512 = llvm_target("haswell"), llvm_target("znver4")
    assert cpu_traits(avx2) == CpuTraits(lanes=8, registers=16, l1_bytes=32 << 10,
                                         l2_bytes=256 << 10)
    assert cpu_traits(avx512) == CpuTraits(lanes=16, registers=32, l1_bytes=32 << 10,
                                           l2_bytes=1 << 20)
    assert tiled_tile(avx2) == (8, 8) and tiled_tile(avx512) == (16, 16)
    # BERT's 128 x 768 -> 3072 (384 AVX2 vectors, 192 AVX-512 ones): accumulators, weight
    # vectors and a broadcast within the registers (3 x 4 in AVX2's 16 spilled)
    assert matmul_tile(128, 384, 16) == (4, 3)
    assert matmul_tile(128, 192, 32) == (8, 3)
    for registers in (16, 32):
        for rows in (1, 8, 16, 64, 128, 197):
            for vectors in (4, 48, 63, 125, 256):
                r, c = matmul_tile(rows, vectors, registers, pad_vectors=vectors % 2 == 1)
                assert r * c + c + 1 <= registers
