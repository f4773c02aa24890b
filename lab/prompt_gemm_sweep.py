"""Which tiles bring the prompt's GEMMs to cuBLAS's speed, from 128 to 4,096 tokens?

    python -m lab.prompt_gemm_sweep [OUTDIR]    (on a GPU; SWEEP_S=seconds bounds the run, default 420;
                                                 MS="4096 1024" picks the prompt lengths, FORMS="tma
                                                 persistent" the forms; cuBLAS always)
    (scripts/gpu_extras.sh prompt runs it)

Question: a prompt chunk runs three kinds of GEMM at the fast level (the norms run apart at prompts): the
merged in-projection (5,120 x 1,024 for attention, 8,224 x 1,024 for DeltaNet: `gemm_kernel`,
solutions/linear.py), the gate/up GEMM with the SwiGLU in its epilogue (2 x 3,584 x 1,024:
`fused_gemm_kernel`, gated, solutions/norm_fusion.py) and the output projections with the residual add in
their epilogue (1,024 x 2,048 and 1,024 x 3,584: `gemm_residual_kernel`, solutions/layer_fusion.py). Their
configs were measured at M = 128 (`prefill_probe`); from M = 256 on they take 128 x 128 tiles (gated
128 x 64), which at N = 1,024 makes cdiv(M, 128) x 8 programs: 32 at M = 512 for 132 SMs. An unsaved
per-kernel profile of a 4,000-token prompt in 512-token chunks (2026-12-05; its figures were not kept) put
the GEMM + residual at 37-40% of the prompt; at M = 128 `prefill_probe` found it and cuBLAS alike at 8-11
us for 4-7 MB of weights, far from both the bytes' and the FLOPs' bound. How far from cuBLAS is each GEMM
at M = 128 to 4,096, which tiles close the gap, and do a tensor-descriptor (TMA) form of the same kernels or
a split-K one go further?
Method: the five shapes (from the config) at each M of MS; for each, (1) the course's kernel as the engine
launches it (its config function's pick), (2) the same kernel at every config of `space` that fits shared
memory, (3) `tma_gemm_kernel` (tritonllm_course/tma_gemm.py: the same three epilogues, operands through
host-built tensor descriptors) over the configs of 64 rows or more, (3b) `tma_persistent_kernel` below, the same
tile walk in one wave of programs (`persistent_space`: grouped tile order, with and without the flattened loop
and warp specialization), (4) up to M = 1,024, the split-K GEMM + residual of `prefill_probe` (K cut
in 2-8 pieces, the last piece of a tile to arrive adds them in a fixed order and the residual; for the plain
GEMM a zero residual, one more read of M x N) at tiles of 64-128 rows, and beside them (5) cuBLAS on the same
operands: `torch.matmul` (for the gated GEMM one product with the stacked [W_gate; W_up], without the SwiGLU: a
lower bound of any eager or `torch.compile` default-mode baseline, which call cuBLAS for the product) and
`torch.addmm` for the GEMM + residual (cuBLAS adds the residual in its epilogue). bf16, each timed as the course
times (`benchmark.time_calls`: a CUDA graph replayed over copies of the operands past L2); TFLOP/s from 2 M N K
(x2 gated). The fastest config of each form is run once more and its output compared with the same product in
fp32 PyTorch (`rel_err`). Writes OUTDIR/prompt_gemm_sweep_<gpu>_<date>.json, saved after every case. `check`
runs the TMA kernel's three epilogues under the interpreter at odd shapes (the split-K kernel has
`prefill_probe`'s check).
Result: NVIDIA H200, 2026-12-05 (lab/results/prompt_gemm_sweep_nvidia-h200_2026-12-05.json; triton 3.6, cut
short by SWEEP_S=120 after M = 4,096 and four shapes of M = 1,024), us: cuBLAS / the course's pick / the course's
kernel at its best config / the TMA form at its best:
  M = 4,096: attention in-projection 62.2 / 83.6 / 83.6 / 66.1; DeltaNet in-projection 93.8 / 132.0 / 132.0 /
  106.6; gate/up + SwiGLU (cuBLAS without the SwiGLU) 84.2 / 109.8 / 109.8 / 91.8; o_proj / out_proj + residual
  29.6 / 35.0 / 33.1 / 26.7; down + residual 46.0 / 55.8 / 52.2 / 44.0.
  M = 1,024: attention in-projection 18.0 / 29.7 / 26.6 / 21.9; DeltaNet in-projection 25.7 / 34.9 / 34.9 / 28.0;
  gate/up + SwiGLU 25.1 / 32.8 / 32.8 / 27.6; o_proj / out_proj + residual 10.9 / 21.2 / 13.4 / 9.7.
The TMA form beats the course's kernel by 1.2-1.4x at the same tiles, comes within 6-22% of cuBLAS on the plain
and gated GEMMs, and beats `torch.addmm` on the GEMM + residual at both lengths. Split-K (M = 1,024) lost
everywhere (17.1-83.2 us). Every best config's output was within 1.7e-3 of the fp32 product (bf16 output).
Verdict: adopted in part: the GEMM + residual's 128-row tiles from M = 256 on as wide as still make about one
wave (`WAVE_TILES`, `gemm_residual_config` in solutions/layer_fusion.py), which the course's own kernel
measured here at 33.1 against 35.0 us (M = 4,096) and 13.4 against 21.2 us (M = 1,024). Then the TMA form,
the larger gain: `tritonllm_course/tma_gemm.py`, which the three callers take on sm_90 from 256 tokens. With it, on an
H100 (2026-12-05), the fast level's time to the first token was 4.84 ms at 1,024 tokens and 16.57 ms at 4,000,
from its CUDA graphs without PDL (lab/results/ttft_tma_nvidia-h100-80gb-hbm3_2026-12-05.json; no run without
the TMA form beside it on that GPU; lab/tma_ttft_probe.py has the A/B on an H200).
A second run, the TMA form alone at M = 128, 512 and 2,048 (H200, 2026-12-05,
lab/results/prompt_gemm_sweep_nvidia-h200_2026-12-05_tma.json, FORMS=tma, SWEEP_S=160), us, cuBLAS / the TMA form
at its best: M = 128: 4.4 / 6.9, 6.2 / 8.0, 6.7 / 7.7, 7.5 / 8.1, 10.1 / 11.8 (the five shapes in the order above);
M = 512: 10.3 / 12.0, 14.2 / 14.9, 12.3 / 14.8, 8.2 / 8.5, 10.7 / 12.6; M = 2,048: 31.7 / 38.9, 50.1 / 55.1,
41.5 / 52.3, 16.3 / 15.4, 23.9 / 24.6. So the form is still 0.64-0.96x of cuBLAS's speed below 2,048 tokens, and
wins only a GEMM + residual: o_proj / out_proj from 1,024 tokens, down at 4,096. Its best tiles there follow a rule
`tma_gemm.config` now takes: 64-row tiles in 128-deep steps with 64 columns where even those fill at most half the
SMs (the GEMM + residual at 128 and 512 tokens: 8.1 against 9.0 us for 64 x 128 at M = 128), 64-deep steps above
1,024 rows, and, ungated, 64-row tiles wherever their waves leave clearly fewer SMs idle (the attention
in-projection at 512 and 1,024 tokens: 12.0 and 21.9 us against 13.7 and 23.7 for 128 x 128). Over both runs' 24
cases its pick is within 2% of the fastest TMA tiles measured (`tests/kernels/test_tma_gemm.py` holds it to 3%);
the rule was drawn from these runs, and the engine's time with it is not measured yet. The persistent form (3b) was
run once, on an H100 (triton 3.6, FORMS="tma persistent", with warp specialization): no case finished in 260 s
and no line was printed, so where it stopped is not known; each config now prints a line before it runs, and
warp specialization is tried only with PERSIST_WS=1.
"""
import os
import sys
import time

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course.tma_gemm import descriptors, launch as tma_launch, store_tile, tma_tile

MS = (4096, 1024, 128, 512, 2048)          # the long prompts first: a run cut short keeps them
FORMS = ("course", "tma", "splitk", "persistent")   # the persistent form last: it may not return
EPS = 1e-6


@triton.jit
def tma_persistent_kernel(x_desc, w_desc, up_desc, res_ptr, y_ptr, M, N, K,
                          GATED: tl.constexpr, RESIDUAL: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr,
                          WS: tl.constexpr):
    """`tma_gemm_kernel` made persistent: PROGRAMS programs (one wave) walk the output tiles in steps of
    PROGRAMS, in groups of GROUP_M row tiles (the tiles a group shares stay in L2). FLATTEN merges the tile
    loop and the K loop into one software pipeline (the next tile's loads start under this tile's epilogue);
    WS asks triton for warp specialization (loads and MMAs in warps of their own)."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS, flatten=FLATTEN, warp_specialize=WS):
        first_m = (tile // per_group) * GROUP_M
        rows = tl.minimum(tiles_m - first_m, GROUP_M)          # row tiles in this (maybe last, short) group
        m0 = (first_m + (tile % per_group) % rows) * BLOCK_M
        n0 = ((tile % per_group) // rows) * BLOCK_N
        acc = tma_tile(x_desc, w_desc, up_desc, y_ptr, y_ptr, m0, n0, N, K, GATED, False, BLOCK_M, BLOCK_N,
                       BLOCK_K)
        store_tile(acc, res_ptr, y_ptr, m0, n0, M, N, RESIDUAL, BLOCK_M, BLOCK_N)


def tma_persistent(x, w, y, cfg, up=None, res=None, sms=None):
    """Launch `tma_persistent_kernel` at config `cfg` (`tma_gemm.config`'s keys plus GROUP_M, FLATTEN, WS): one
    program an SM (`sms`, default this GPU's), fewer when there are fewer tiles."""
    M, K = x.shape
    N = w.shape[0]
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    if sms is None:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    programs = min(sms, triton.cdiv(M, bm) * triton.cdiv(N, bn))
    tma_persistent_kernel[(programs,)](*descriptors(x, w, up, cfg), y if res is None else res, y, M, N, K,
                                       GATED=up is not None, RESIDUAL=res is not None, BLOCK_M=bm, BLOCK_N=bn,
                                       BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], PROGRAMS=programs,
                                       FLATTEN=cfg["FLATTEN"], WS=cfg["WS"], num_warps=cfg["num_warps"],
                                       num_stages=cfg["num_stages"])
    return y


def reference(x, w, up=None, res=None):
    """The three epilogues in fp64."""
    y = x.double() @ w.double().T
    if up is not None:
        y = torch.nn.functional.silu(y) * (x.double() @ up.double().T)
    return y if res is None else y + res.double()


def check(device="cpu"):
    """The TMA kernels' three epilogues at odd shapes (M, N, K not multiples of the tiles: the descriptors'
    zero padding), outputs poisoned with NaN, the persistent one on 3 programs in groups of 2 row tiles (a
    program walks several tiles; the last group is short): the largest relative error against fp64."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 1}
    persistent = {**cfg, "GROUP_M": 2, "FLATTEN": False, "WS": False}
    for M, N, K in [(37, 24, 40), (5, 48, 16)]:
        x = torch.randn(M, K, generator=gen).to(device)
        w = (torch.randn(N, K, generator=gen) / K ** 0.5).to(device)
        up = (torch.randn(N, K, generator=gen) / K ** 0.5).to(device)
        res = torch.randn(M, N, generator=gen).to(device)
        for kw in ({}, {"up": up}, {"res": res}):
            for run in (lambda y: tma_launch(x, w, y, up=kw.get("up"), residual=kw.get("res"), cfg=cfg),
                        lambda y: tma_persistent(x, w, y, persistent, sms=3, **kw)):
                y = torch.full((M, N), float("nan"), device=device)
                run(y)
                worst = max(worst, common.rel_err(y, reference(x, w, **kw)))
    return worst


def shapes(config):
    """(name, N, K, kind) of the fast level's prompt GEMMs; kind: "plain", "gated" (2 x N rows) or "residual"."""
    c = config
    attn = (2 * c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim      # q|gate, k, v
    key, value = c.linear_num_key_heads * c.linear_key_head_dim, c.linear_num_value_heads * c.linear_value_head_dim
    deltanet = 2 * key + 2 * value + 2 * c.linear_num_value_heads                     # q, k, v, z, b, a
    h, i = c.hidden_size, c.intermediate_size
    return [("attention in_proj", attn, h, "plain"), ("DeltaNet in_proj", deltanet, h, "plain"),
            ("gate/up + SwiGLU", i, h, "gated"), ("o_proj / out_proj + residual", h, value, "residual"),
            ("down + residual", h, i, "residual")]


def space(M, gated):
    """The tile configs tried at M rows (either form): every side >= 16; no BLOCK_M taller than M's power of
    two and, past M = 256, none under 64 (wgmma's tile); 256 columns only on 8 warps and never gated (two fp32
    accumulators); 8 warps only for tiles of 64 x 64 or more."""
    for bm in (16, 32, 64, 128):
        if bm > max(16, triton.next_power_of_2(M)) or (bm < 64 and M > 256):
            continue
        for bn in ((64, 128) if gated else (64, 128, 256)):
            for bk in (64, 128):
                for warps in (4, 8):
                    if bn == 256 and warps == 4 or bm * bn < 64 * 64 and warps == 8:
                        continue
                    for stages in (3, 4):
                        yield {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}


def persistent_space(M, gated):
    """The persistent TMA kernel's configs at M rows: the TMA form's fastest tiles at M = 1,024 and 4,096
    (128 x 128 on 4 or 8 warps, 128 x 256 on 8 but not gated, 64-row tiles below M = 512 and 128 x 64 gated),
    in groups of 8 row tiles, each without and with the flattened loop; with PERSIST_WS=1 also with warp
    specialization (a run with it on an H100, triton 3.6, 2026-12-05, finished no case in 260 s)."""
    tiles = [(128, 128, 4), (128, 128, 8)] + ([] if gated else [(128, 256, 8)]) + ([(128, 64, 4)] if gated else [])
    if M < 512:
        tiles += [(64, 128, 4), (64, 64, 4)]
    for bm, bn, warps in tiles:
        for flatten in (False, True):
            for ws in ((False, True) if os.environ.get("PERSIST_WS") == "1" else (False,)):
                yield {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "num_warps": warps, "num_stages": 3,
                       "GROUP_M": 8, "FLATTEN": flatten, "WS": ws}


def splitk_space(M):
    """The split-K GEMM + residual's configs (`prefill_probe.gemm_residual_splitk`) at M rows, M <= 1,024: tiles
    tall enough that the activations are read by few column tiles, K cut in 2-8 pieces for the programs
    (at M = 128 the activations are read once per column tile: with 16 columns, 64 times over)."""
    if M > 1024:
        return
    for bm in (64, 128):
        for bn in (32, 64, 128):
            for split in (2, 4, 8):
                for bk in (64, 128):
                    yield {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 8 if bm * bn >= 8192 else 4,
                           "num_stages": 3, "SPLIT": split}


def shared_bytes(cfg, gated):
    """The pipeline's operand tiles in shared memory, bf16 (num_stages deep)."""
    return cfg["num_stages"] * (cfg["BLOCK_M"] + (2 if gated else 1) * cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2


def operands(M, N, K, kind):
    """Copies of the case's operands past L2 (the weight dominates: one copy a set)."""
    mk = {"dtype": torch.bfloat16, "device": "cuda"}
    w0 = torch.randn(N, K, **mk) / K ** 0.5
    up0 = torch.randn(N, K, **mk) / K ** 0.5 if kind == "gated" else None
    x = torch.randn(M, K, **mk)
    res = torch.randn(M, N, **mk) if kind == "residual" else None
    zeros = torch.zeros(M, N, **mk) if kind == "plain" else None      # the split-K form's residual there
    per_set = (N * K * (2 if up0 is not None else 1) + M * K + 2 * M * N) * 2
    sets = []
    for i in range(common.copies_past_l2(per_set, most=16)):
        s = {"x": x, "w": w0 if i == 0 else w0.clone(), "y": torch.empty(M, N, **mk), "res": res, "zeros": zeros,
             "up": None if up0 is None else (up0 if i == 0 else up0.clone())}
        s["wu"] = w0 if up0 is None else torch.cat([s["w"], s["up"]])       # [2N, K] for the gated GEMM
        sets.append(s)
    return sets


def _launchers(M, N, K, kind, linear, fused, residual):
    """call(cfg) -> a function of one operand set: the course's kernel at cfg."""
    def course(cfg):
        grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
        tiles = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
        if kind == "residual":
            return lambda s: residual.gemm_residual_kernel[grid](
                s["x"], s["w"], s["res"], s["y"], M, N, K, **tiles, num_warps=cfg["num_warps"],
                num_stages=cfg["num_stages"])
        if kind == "plain":
            return lambda s: linear.gemm_kernel[grid](s["x"], s["w"], s["y"], M, N, K, **tiles,
                                                      num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        return lambda s: fused.fused_gemm_kernel[grid](
            s["x"], s["w"], s["w"], s["up"], s["y"], M, N, K, EPS, HAS_NORM=False, GATED=True, **tiles,
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return course


def _rel_err(fn, s) -> float:
    """fn's output on operand set s against the same product in fp32 PyTorch: a timed config that computes
    something else would show here."""
    fn(s)
    x, w = s["x"].float(), s["w"].float()
    want = x @ w.T
    if s["up"] is not None:
        want = torch.nn.functional.silu(want) * (x @ s["up"].float().T)
    if s["res"] is not None:
        want = want + s["res"].float()
    return common.rel_err(s["y"], want)


def _time(fn, sets):
    """us per fn(operand set), the best of two graph replays over the sets."""
    return common.best_time_calls(lambda **s: fn(s), sets)


def main(out):
    common.setup()
    from lab.prefill_probe import gemm_residual_splitk as splitk
    from tritonllm_course import kernels
    from tritonllm_course.config import QWEN35_0_8B
    linear = kernels.load("linear", "solutions").module
    fused = kernels.load("norm_fusion", "solutions").module
    residual = kernels.load("layer_fusion", "solutions").module
    path = common.result_path(out, "prompt_gemm_sweep")
    budget, t0 = float(os.environ.get("SWEEP_S", "420")), time.time()
    ms = [int(m) for m in os.environ.get("MS", " ".join(map(str, MS))).split()]
    forms = os.environ.get("FORMS", " ".join(FORMS)).split()
    smem = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    res = common.header(check_rel_err=check("cuda"), shared_bytes=smem, cases=[])
    torch.manual_seed(0)
    for M in ms:
        for name, N, K, kind in shapes(QWEN35_0_8B):
            if time.time() - t0 > budget:
                break
            gated = kind == "gated"
            flops = 2 * M * N * K * (2 if gated else 1)
            sets = operands(M, N, K, kind)
            if kind == "residual":
                cublas = _time(lambda s: torch.addmm(s["res"], s["x"], s["w"].T, out=s["y"]), sets)
                hand = residual.gemm_residual_config(M, N, K, torch.bfloat16, torch.device("cuda"))
            else:
                cublas = _time(lambda s: torch.matmul(s["x"], s["wu"].T), sets)
                hand = (fused.fused_gemm_config(M, N, K, True, torch.bfloat16, torch.device("cuda")) if gated
                        else linear.gemm_config(M, N, K, torch.bfloat16, torch.device("cuda")))
            course = _launchers(M, N, K, kind, linear, fused, residual)
            rows, fns = [], {}
            tiles = list(space(M, gated))
            for form, configs in (("course", [hand] + [c for c in tiles if c != hand]),
                                  ("tma", [c for c in tiles if c["BLOCK_M"] >= 64]),
                                  ("splitk", list(splitk_space(M)) if kind != "gated" else []),
                                  ("persistent", list(persistent_space(M, gated)))):
                if form not in forms:
                    continue
                for cfg in configs:
                    if time.time() - t0 > budget or shared_bytes(cfg, gated) > smem:
                        continue
                    programs = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]) * cfg.get("SPLIT", 1)
                    if form == "persistent":
                        programs = min(programs, torch.cuda.get_device_properties(0).multi_processor_count)
                    row = {"form": form, **cfg, "programs": programs}
                    # where a run stands if a compile or a kernel never returns: the last line printed
                    print(f"  M={M} {name}: {form} {cfg}", file=sys.stderr, flush=True)
                    try:
                        if form == "course":
                            fn = course(cfg)
                        elif form == "splitk":
                            def fn(s, c=cfg):
                                res = s["res"] if s["res"] is not None else s["zeros"]
                                return splitk(s["x"], s["w"], res, s["y"], c["SPLIT"], c["BLOCK_M"], c["BLOCK_N"],
                                              c["BLOCK_K"], c["num_warps"], c["num_stages"])
                        elif form == "tma":
                            def fn(s, cfg=cfg):
                                return tma_launch(s["x"], s["w"], s["y"], up=s["up"], residual=s["res"], cfg=cfg)
                        else:
                            def fn(s, cfg=cfg):
                                return tma_persistent(s["x"], s["w"], s["y"], cfg, up=s["up"], res=s["res"])
                        us = _time(fn, sets)
                        row.update(us=us, tflops=flops / us / 1e6, vs_cublas=cublas / us)
                        fns[id(row)] = fn
                    except Exception as e:  # noqa: BLE001  (a config that does not compile is recorded)
                        row["error"] = common.error_text(e)
                    rows.append(row)
            ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
            hand_row = next((r for r in rows if r["form"] == "course" and "us" in r
                             and all(r[k] == hand[k] for k in hand)), None)
            case = {"shape": name, "M": M, "N": N, "K": K, "kind": kind, "flops": flops, "cublas_us": cublas,
                    "cublas_tflops": flops / cublas / 1e6, "hand": hand, "hand_row": hand_row,
                    "best_course": next((r for r in ok if r["form"] == "course"), None),
                    "best_tma": next((r for r in ok if r["form"] == "tma"), None),
                    "best_persistent": next((r for r in ok if r["form"] == "persistent"), None),
                    "best_splitk": next((r for r in ok if r["form"] == "splitk"), None), "best": ok[:8], "all": rows}
            for key in ("best_course", "best_tma", "best_persistent", "best_splitk"):
                if case[key] is not None:
                    case[key] = {**case[key], "rel_err": _rel_err(fns[id(case[key])], sets[0])}
            res["cases"].append(case)
            best = ok[0] if ok else None
            print(f"M={M} {name} {N}x{K}: cuBLAS {cublas:.1f} us; course's pick "
                  f"{hand_row and round(hand_row['us'], 1)} us; best {best and round(best['us'], 1)} us "
                  f"({best and best['form']} {best and {k: best[k] for k in hand}})", flush=True)
            common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
