"""The per-group int8 GEMV at the decode shapes: why so far from its floor, and which tile fixes it?

    python -m lab.quant_group_probe [OUTDIR]    (on a GPU; PROBE_S bounds it, default 120)

Question: the kernel table with max-autotune (results/kernels_max_autotune/, H100, 2026-12-06) has chapter
31_weight_quant's per-group int8 GEMV (`quant_gemv_kernel`, groups of 128) at 6% of the copy ceiling at the down
projection (1,024 x 3,584: 21.5 us against 4.8 us for max-autotune) and behind max-autotune at two of the K = 1,024
shapes, while its LM head runs at 78%. `gemv_config` gives a per-group call steps of one group (128 columns)
and raises the rows to 4096 / 128 = 32 a program, so that a step still moves 4 KB: at N = 1,024 that leaves 32
programs for 132 SMs. Is that the cause, and which fix is fastest at every decode shape: the per-channel
tile's rows at steps of one group, or steps over several groups with the scales gathered per column?
Method: the six decode shapes of Qwen3.5-0.8B, int8 with a scale per 128 columns, each call timed as the course
times (`benchmark.time_calls` through `common.best_time_calls`: a CUDA graph over enough weights to pass L2):
"as is" (`gemv_config(N, K, 128)`); "channel rows, one group a step" (the per-channel config's rows and warps,
steps of 128); "several groups a step" (`wide_group_kernel` below at the per-channel config: a step of up to
2,048 columns, each column's scale loaded from s[row, k // 128]); then a sweep of `wide_group_kernel` over rows
2-32, steps 128-2,048 and 16-64 weights a thread, within PROBE_S. Beside them the per-channel int8 GEMV (its
config) on the same weights. Floor: the weight's bytes, its scales, x and y at the copy bandwidth (`ceiling_gbps`).
Writes OUTDIR/quant_group_probe_<gpu>_<date>.json, saved after every shape. `check` compares `wide_group_kernel`
with `quant_gemv` at odd shapes (a partial last group, a row block past N) under the interpreter or on the GPU.
Result: NVIDIA H100 80GB HBM3, 2026-12-06, PROBE_S=90
(lab/results/quant_group_probe_nvidia-h100-80gb-hbm3_2026-12-06.json;
the sweep timed its whole grid: 46 tiles a shape at K = 1,024, 55 at the wider K). Us a call, as is / channel rows,
one group a step / several groups a step / per-channel int8: the LM head 95.3 / 90.7 / 216.7 / 84.7 (floor 86.8);
DeltaNet in_proj 8.0 / 7.4 / 9.1 / 5.3; gate|up 7.9 / 7.2 / 8.5 / 5.0; attention 7.6 / 6.7 / 6.7 / 4.1; down 21.5 /
15.4 / 5.8 / 3.9; o_proj 12.4 / 9.4 / 3.6 / 3.0. So the 32 programs are the cause at the narrow shapes: steps over
several groups win there 3.4-3.7x, and lose at the LM head and at the two wider K = 1,024 shapes (DeltaNet in_proj,
gate|up), level at the attention projection (the gathered scales cost more than the long step saves).
Verdict: adopted in solutions/quant.py: `quant_gemv_kernel` gathers each column's scale when a step spans several
groups, and `gemv_config` keeps the per-channel step where K > 1024 outside the LM head, and steps of one group on
the per-channel rows elsewhere. The sweep's best tiles at K = 1024 (e.g. 2 rows in steps of 256 on one warp for the
attention projection, 5.5 us) are not taken: `gemv_config` keeps steps of one group there. Run again after the
change (lab/results/quant_group_probe_nvidia-h100-80gb-hbm3_2026-12-06_adopted.json), "as is" took 6.0 us at the
down projection, 4.1 at o_proj and 90.8 at the LM head.
"""
import os
import time

import torch
import triton
import triton.language as tl

from lab import common

GROUP = 128
SHAPES = [(248320, 1024, "LM head"), (8224, 1024, "DeltaNet in_proj"), (7168, 1024, "gate|up"),
          (5120, 1024, "attention q|gate|k|v"), (1024, 3584, "down"), (1024, 2048, "o_proj / out_proj")]


@triton.jit
def wide_group_kernel(x_ptr, w_ptr, s_ptr, y_ptr, N, K, GROUPS, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    """y[n] = sum_k q[n, k] s[n, k // GROUP] x[k] for BLOCK_N rows; a step of BLOCK_K columns may span several
    groups: each column's scale is loaded beside its weight (the same few scales a row, from L1)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    row_start = w_ptr + rows.to(tl.int64) * K
    srow = s_ptr + rows.to(tl.int64) * GROUPS
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k_step in range(0, K, BLOCK_K):
        k = k_step + cols
        ok = row_ok[:, None] & (k < K)[None, :]
        q = tl.load(row_start[:, None] + k[None, :], mask=ok, other=0.0, eviction_policy="evict_first")
        s = tl.load(srow[:, None] + (k // GROUP)[None, :], mask=ok, other=0.0)          # [BLOCK_N, BLOCK_K]
        x = tl.load(x_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        acc += q.to(tl.float32) * s * x[None, :]
    tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=row_ok)


def wide_group(x, q, s, y, bn, bk, nw):
    """`wide_group_kernel` over q [N, K] int8 with scales s [N, ceil(K / GROUP)] into y [N]."""
    N, K = q.shape
    wide_group_kernel[(triton.cdiv(N, bn),)](x, q, s, y, N, K, s.shape[1], GROUP=GROUP, BLOCK_N=bn, BLOCK_K=bk,
                                             num_warps=nw)
    return y


def check(device=None) -> float:
    """`wide_group_kernel` against `quant_gemv` (per group) at odd shapes: the largest relative error."""
    from tritonllm_course import kernels
    from tritonllm_course.reference.quant import quantize
    from tritonllm_course.runtime import runtime
    device = device or runtime().device
    quant = kernels.load("quant", "solutions").module
    worst = 0.0
    for N, K, bn, bk in ((37, 509, 4, 256), (70, 300, 16, 128), (9, 1031, 2, 512)):
        gen = torch.Generator(device=device).manual_seed(N * K)
        q, s, _ = quantize(torch.randn(N, K, device=device, generator=gen), "int8_group", GROUP)
        x = torch.randn(K, device=device, generator=gen)
        want = quant.quant_gemv(x, q, s, GROUP)
        got = wide_group(x, q, s, torch.empty(N, device=device), bn, bk, max(1, bn * bk // 1024))
        worst = max(worst, common.rel_err(got, want))
    return worst


def main(out):
    common.setup()
    from tritonllm_course import kernels
    from tritonllm_course.measure.benchmark import ceiling_gbps
    from tritonllm_course.reference.quant import quantize
    quant = kernels.load("quant", "solutions").module
    ceiling = ceiling_gbps()
    budget, t0 = float(os.environ.get("PROBE_S", "120")), time.time()
    path = common.result_path(out, "quant_group_probe")
    res = common.header(check_rel_err=check("cuda"), ceiling_gbps=ceiling, group=GROUP,
                        floor="bytes at the copy bandwidth (read + write rate)", cases=[])
    for N, K, what in SHAPES:
        q0, s0, _ = quantize(0.02 * torch.randn(N, K, device="cuda"), "int8_group", GROUP)
        qc, sc, _ = quantize(0.02 * torch.randn(N, K, device="cuda"), "int8")
        x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
        copies = common.copies_past_l2(N * K)
        sets = [{"x": x, "q": q0 if i == 0 else q0.clone(), "s": s0,
                 "y": torch.empty(N, device="cuda", dtype=torch.bfloat16)} for i in range(copies)]
        csets = [{**st, "q": qc if i == 0 else qc.clone(), "s": sc} for i, st in enumerate(sets)]
        floor_us = (N * K + 4 * s0.numel() + 2 * K + 2 * N) / ceiling / 1e3
        channel = quant.gemv_config(N, K, None)
        bn, bk, nw = channel["BLOCK_N"], channel["BLOCK_K"], channel["num_warps"]
        grows = max(1, min(8, bn * GROUP // 1024))
        us = {"as is": common.best_time_calls(lambda x, q, s, y: quant.quant_gemv(x, q, s, GROUP, out=y), sets),
              "channel rows, one group a step": common.best_time_calls(
                  lambda x, q, s, y: quant.quant_gemv_kernel[(triton.cdiv(N, bn),)](
                      x, q, s, y, N, K, s.shape[1], GROUP=GROUP, BLOCK_N=bn, BLOCK_K=GROUP, num_warps=grows), sets),
              "several groups a step": common.best_time_calls(
                  lambda x, q, s, y: wide_group(x, q, s, y, bn, bk, nw), sets),
              "per-channel int8 (its config)": common.best_time_calls(
                  lambda x, q, s, y: quant.quant_gemv(x, q, s, None, out=y), csets)}
        sweep = []
        for rows in (2, 4, 8, 16, 32):
            for step in (128, 256, 512, 1024, 2048):
                for per_thread in (16, 32, 64):
                    warps = rows * step // (32 * per_thread)
                    if time.time() - t0 > budget or step > max(GROUP, triton.next_power_of_2(K)) \
                            or not 1 <= warps <= 16:
                        continue
                    try:
                        t = common.best_time_calls(
                            lambda x, q, s, y, r=rows, st=step, w=warps: wide_group(x, q, s, y, r, st, w), sets)
                        sweep.append({"BLOCK_N": rows, "BLOCK_K": step, "num_warps": warps, "us": t})
                    except Exception as e:  # noqa: BLE001  (a config that does not compile is recorded)
                        sweep.append({"BLOCK_N": rows, "BLOCK_K": step, "num_warps": warps,
                                      "error": common.error_text(e)})
        best = sorted((r for r in sweep if "us" in r), key=lambda r: r["us"])
        res["cases"].append({"shape": what, "N": N, "K": K, "floor_us": floor_us, "as_is_config":
                             quant.gemv_config(N, K, GROUP), "channel_config": channel, "us": us,
                             "pct_of_floor": {k: 100 * floor_us / v for k, v in us.items()},
                             "sweep_best": best[:6], "sweep": sweep})
        print(f"{what} {N}x{K}: floor {floor_us:.2f} us; " + ", ".join(f"{k} {v:.2f}" for k, v in us.items())
              + (f"; sweep best {best[0]}" if best else ""), flush=True)
        common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
