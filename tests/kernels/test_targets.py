"""Every kernel the engine launches, compiled without a GPU for the learners' GPUs (`tritonllm_course.targets`),
within each GPU's limits; the config functions and the autotuner's pruning choosing by capability.

The compile runs in one fresh process without the interpreter, once for the module (about a hundred and fifty
compilations): a T4 in fp16 (the least shared memory, no PDL, no bf16) at every level with chapter 26_autotune's
autotuned projections, and an H100/H200 in bf16 (the PDL kernels) at the fast level. `tritonllm-course targets`
compiles the rest (sm_80, sm_86, sm_89, both dtypes, every level)."""
import pytest
import torch

from tritonllm_course import cli, kernels, targets
from tritonllm_course.triton_helpers import GPUS, compiling_for, rows_within

AT = kernels.load("autotune", "solutions").module
FA = kernels.load("flash_attention", "solutions").module
FD = kernels.load("flash_decoding", "solutions").module
ATT = kernels.load("attention", "solutions").module
LIN = kernels.load("linear", "solutions").module
META = torch.device("meta")


@pytest.fixture(scope="module")
def t4():
    return targets.survey([75], ["float16"], targets.LEVELS, autotune=True)


@pytest.fixture(scope="module")
def h200():
    return targets.survey([90], ["bfloat16"], ["fast"], autotune=False)


def _unfit(found):
    return [f"{k.label()} sm_{k.arch} {k.dtype}: {'; '.join(k.problems)}" for k in found if k.problems]


def test_every_kernel_of_every_level_fits_a_t4(t4):
    assert not _unfit(t4)
    assert {k.arch for k in t4} == {75} and {k.dtype for k in t4} == {"float16"}
    where = {w for k in t4 for w in k.where}
    assert where == {*targets.LEVELS, "autotune"}
    assert not any(k.pdl for k in t4)                     # no PDL on sm_75: neither the attribute nor the constexpr
    names = {k.name for k in t4}
    # the kernels of each level's own steps, found by the trace (not listed by hand elsewhere)
    for name in ("gemm_kernel", "decode_attention_kernel", "flash_attention_kernel", "flash_decoding_split_kernel",
                 "gemv_residual_kernel", "gemm_autotuned_kernel", "gemv_autotuned_kernel", "chunk_scan_kernel"):
        assert name in names
    assert all(k.registers > 0 for k in t4)              # read from every cubin


def test_the_t4_gets_its_own_tiles(t4):
    """What an H200's configs would take there does not fit: the T4's are smaller (the figures are compiled)."""
    flash = [k for k in t4 if k.name == "flash_attention_kernel"]
    assert flash and all(k.constexprs["BLOCK_N"] < 64 for k in flash)
    assert max(k.shared_bytes for k in t4) <= GPUS[75].shared_bytes
    # the autotuner's GEMM tries only the configs its pruning keeps for 64 KB, and each compiles within it
    tuned = {(k.constexprs["BLOCK_M"], k.constexprs["BLOCK_N"], k.constexprs["BLOCK_K"], k.num_stages)
             for k in t4 if k.name == "gemm_autotuned_kernel"}
    assert 0 < len(tuned) < len(AT.gemm_configs())


def test_the_h200_launches_with_pdl_within_its_limits(h200):
    assert not _unfit(h200)
    assert any(k.pdl for k in h200) and {k.arch for k in h200} == {90}


def test_limits_are_checked():
    """A kernel over a GPU's shared memory, registers or PDL is named with the limit it breaks."""
    k = targets.Kernel("k", 75, "float16", ["fast"], {}, 16, 2, True, shared_bytes=70_000, registers=255)
    problems = targets._problems(k, GPUS[75], "")
    assert any("shared memory 70,000" in p for p in problems)
    assert any("255 registers x 512 threads" in p for p in problems)
    assert any("PDL" in p for p in problems)
    ok = targets.Kernel("k", 90, "bfloat16", ["fast"], {}, 4, 2, True, shared_bytes=70_000, registers=128)
    assert targets._problems(ok, GPUS[90], "") == []
    assert targets._problems(ok, GPUS[90], "ptxas failed")[0].startswith("does not compile")


def test_configs_follow_the_target():
    """The config functions read the GPU compiled for: the same call, smaller tiles on the smaller GPUs."""
    for cc in GPUS:
        with compiling_for(GPUS[cc]):
            rows, stages = ATT.decode_config(2, 256, GPUS[cc].shared_bytes)
            assert max(stages, 2) * rows * 2 * 256 * 2 <= GPUS[cc].shared_bytes
            cfg = FD.decoding_config(4096, 2, 256, 2, META)
            assert cfg["num_splits"] <= GPUS[cc].sms
            gemm = LIN.gemm_config(128, 6144, 1024, torch.float16, META)
            assert gemm["num_stages"] * (gemm["BLOCK_M"] + gemm["BLOCK_N"]) * gemm["BLOCK_K"] * 2 \
                <= GPUS[cc].shared_bytes
            assert AT.device_limits(META) == (GPUS[cc].sms, GPUS[cc].shared_bytes)
    long_h200 = FA.flash_config(4096, 4, 2, 256, 2, shared_bytes=GPUS[90].shared_bytes)
    long_a100 = FA.flash_config(4096, 4, 2, 256, 2, shared_bytes=GPUS[80].shared_bytes)
    assert long_h200["BLOCK_M"] == 128 and long_a100["BLOCK_M"] < 128
    assert FA.flash_config(128, 4, 2, 256, 2, shared_bytes=GPUS[75].shared_bytes)["BLOCK_N"] < \
        FA.flash_config(128, 4, 2, 256, 2)["BLOCK_N"]


def test_autotune_prunes_by_the_target():
    configs = AT.gemm_configs()
    with compiling_for(GPUS[75]):
        _, shared = AT.device_limits(META)
    assert shared == GPUS[75].shared_bytes
    kept = AT.select_gemm_configs(configs, 128, 1024, shared, 2)
    on_h200 = AT.select_gemm_configs(configs, 128, 1024, GPUS[90].shared_bytes, 2)
    # fewer on the T4, none it would not have on the H200; what they really take there is compiled above
    assert kept and len(kept) < len(on_h200) and all(c in on_h200 for c in kept)


def test_rows_within():
    assert rows_within(None, 64, 1 << 20, 3) == 64
    assert rows_within(64 * 1024, 64, 1024, 3) == 16
    assert rows_within(1024, 64, 1024, 3) == 16                      # never below `least`


def test_the_pdl_whole_tile_takes_the_ks_that_fill_it():
    """The decode GEMV's whole tile (`pdl_gemv_config`) at the family's K: every K of 0.8B, 9B's 4,096 and 12,288
    and 27B's 6,144 fill at least three quarters of their power-of-two width; 4B's 2,560 and 9,216 and 27B's
    5,120 do not, and 27B's 17,408 is past PDL_MAX_K: those walk K. Rows times width stay 16 warps' worth."""
    from tritonllm_course.triton_helpers import PDL_MAX_K, pdl_gemv_config
    whole = {1024: 4, 2048: 4, 3584: 4, 4096: 4, 6144: 2, 12288: 1}
    for K, rows in whole.items():
        cfg = pdl_gemv_config(K)
        assert cfg["BLOCK_N"] == rows and cfg["BLOCK_K"] >= K and cfg["BLOCK_N"] * cfg["BLOCK_K"] <= PDL_MAX_K, K
    assert [K for K in (2560, 5120, 9216, 17408) if pdl_gemv_config(K) is not None] == []


def test_bad_arguments_are_named(capsys, tmp_path):
    assert cli.main(["targets", "--arch", "74"]) == 2
    assert "74" in capsys.readouterr().err
    assert cli.main(["targets", "--dtype", "float8"]) == 2
    assert "float8" in capsys.readouterr().err
    assert cli.main(["targets", "--level", "fastest"]) == 2
    assert cli.main(["targets", "--arch", "sm75"]) == 2
    assert cli.main(["targets", "--json", str(tmp_path)]) == 2           # a folder: refused before the survey
    assert capsys.readouterr().err.splitlines()[-1] == f"--json: {tmp_path} is a folder; name the file to write"
    with pytest.raises(ValueError, match="archs"):
        targets.survey([70])
    for option in ("--arch", "--dtype", "--level"):       # an empty list compiled nothing and passed (exit 0)
        assert cli.main(["targets", option, ","]) == 2
        assert capsys.readouterr().err.splitlines() == [f"{option} empty: choose from " + {
            "--arch": "[75, 80, 86, 89, 90]", "--dtype": "['bfloat16', 'float16']",
            "--level": "['operators', 'fused', 'fast']"}[option]]


def test_the_compiled_prompt_is_the_engines_default_chunk_and_one_more():
    """The targets compile the engine as it runs by default: a full prompt chunk of the engine's size, then a
    second, short one (a default changed in one place and not the other would leave its tiles unchecked)."""
    from tritonllm_course.engine import engine
    assert targets.PROMPT_CHUNK == engine.PREFILL_CHUNK
    assert targets.PROMPT_CHUNK < targets.PROMPT <= targets.MAX_SEQ_LEN - 2
