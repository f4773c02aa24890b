"""`tritonllm_course.lowering` (chapter 28_compilers): a course kernel compiled for an H200 on this machine, every stage
read back, and what the compiler is told (divisibility hints) and decides (layouts, pipelining, the
tensor-core instruction per GPU generation). Under the CPU interpreter the compile runs in a fresh process."""
import pytest

from tritonllm_course import kernels, lowering
from tritonllm_course.runtime import runtime

RT = runtime()
ADD = kernels.load("vector_add", "solutions").module
GE = kernels.load("gemm_epilogue", "solutions").module
ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"}
GEMM_SIG = {"x_ptr": "*fp16", "w_ptr": "*fp16", "y_ptr": "*fp16", "M": 64, "N": 256, "K": 256}
GEMM_TILES = {"ACT": 2, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}


@pytest.fixture(scope="module")
def lowered():
    """One process for every compile of this file: vector add at two warp counts and two n, the GEMM with
    and without a pipeline on sm_90, and on sm_80."""
    requests = [dict(kernel=ADD.add_kernel, signature={**ADD_SIG, "n": 4096}, constexprs={"BLOCK_SIZE": 1024},
                     num_warps=w) for w in (4, 8)]
    requests.append(dict(kernel=ADD.add_kernel, signature={**ADD_SIG, "n": 4095}, constexprs={"BLOCK_SIZE": 1024}))
    requests += [dict(kernel=GE.gemm_gelu_kernel, signature=GEMM_SIG, constexprs=GEMM_TILES, num_stages=s, arch=a)
                 for s, a in ((1, 90), (3, 90), (3, 80))]
    return lowering.lower_many(requests)


def test_every_stage_comes_back(lowered):
    low = lowered[0]
    assert set(low.asm) == set(lowering.STAGES)
    assert "tt.func public @add_kernel" in low.asm["ttir"] and "#ttg.blocked" in low.asm["ttgir"]
    assert "define" in low.asm["llir"] and ".target sm_90" in low.asm["ptx"] and low.instructions() > 10
    assert low.resources["REG"] > 0 and low.resources["LOCAL"] == 0
    assert low.options == {"num_warps": 4, "num_stages": 3} and low.constexprs == {"BLOCK_SIZE": 1024}
    assert "add_kernel[BLOCK_SIZE=1024] num_warps=4" in str(low)


def test_the_interpreter_lowers_nothing_itself():
    """Under the interpreter the decorated kernel is an InterpretedFunction: Python run on numpy arrays."""
    if RT.interpreted:
        assert type(ADD.add_kernel).__name__ == "InterpretedFunction"
    else:
        assert type(ADD.add_kernel).__name__ == "JITFunction"


def test_num_warps_changes_the_layout_and_nothing_else_upstream(lowered):
    four, eight = lowered[:2]
    assert four.asm["ttir"].replace("num_warps", "") == eight.asm["ttir"].replace("num_warps", "")
    changed = lowering.diff(four, eight, "ttgir", r"^#blocked")
    assert any("warpsPerCTA = [4]" in ln for ln in changed if ln.startswith("-"))
    assert any("warpsPerCTA = [8]" in ln for ln in changed if ln.startswith("+"))


def test_divisibility_hints_allow_vector_loads(lowered):
    """n = 4096 is a multiple of 16, as the launcher would say: 16-byte loads; n = 4095 is not, and a block
    of 1024 may then end anywhere: the mask is checked element by element, 4-byte loads."""
    aligned, odd = lowered[0], lowered[2]
    assert "%n: i32 {tt.divisibility = 16 : i32}" in aligned.asm["ttir"]
    assert "%n: i32 {tt.divisibility" not in odd.asm["ttir"]
    assert aligned.count("ptx", r"ld\.global\.v4\.b32") > 0 and odd.count("ptx", r"ld\.global\.v4") == 0


def test_num_stages_pipelines_the_dot_loop(lowered):
    flat, piped = lowered[3], lowered[4]
    assert flat.count("ttgir", r"async_copy_global_to_local") == 0
    assert piped.count("ttgir", r"async_copy_global_to_local") > 0
    assert piped.lines("ttgir", r"ttg\.local_alloc.*memdesc<3x64x64xf16")       # 3 stages of the x tile


def test_the_tensor_core_instruction_follows_the_gpu(lowered):
    hopper, ampere = lowered[4], lowered[5]
    assert hopper.count("ptx", r"wgmma\.mma_async") > 0 and hopper.count("ptx", r"mma\.sync") == 0
    assert ampere.count("ptx", r"mma\.sync") > 0 and ampere.count("ptx", r"wgmma") == 0
    assert hopper.count("sass", r"\bHGMMA") > 0 and ampere.count("sass", r"\bHMMA") > 0


def test_bad_requests_are_named():
    with pytest.raises(TypeError, match="must be a @triton.jit function"):
        lowering.lower(42, {})
    with pytest.raises(TypeError, match="must be a type string or an int"):
        lowering.lower(ADD.add_kernel, {**ADD_SIG, "n": 4.5}, {"BLOCK_SIZE": 8})
    with pytest.raises(ValueError, match="no type for argument 'n'"):
        lowering.lower(ADD.add_kernel, ADD_SIG, {"BLOCK_SIZE": 8})
    with pytest.raises(ValueError, match=r"no argument\(s\) \['m'\]"):
        lowering.lower(ADD.add_kernel, {**ADD_SIG, "n": 16, "m": 3}, {"BLOCK_SIZE": 8})


def test_a_kernel_outside_a_file_is_refused_under_the_interpreter():
    if not RT.interpreted:
        pytest.skip("on a GPU a kernel is compiled in this process, wherever it is defined")
    scope = {}
    exec("import triton\n@triton.jit\ndef k(x_ptr):\n    pass\n", scope)
    with pytest.raises(ValueError, match="not defined in a .py file"):
        lowering.lower(scope["k"], {"x_ptr": "*fp32"})
