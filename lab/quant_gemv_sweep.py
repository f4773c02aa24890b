"""Which launch config brings the 8-bit decode GEMV nearest its own floor?

    python -m lab.quant_gemv_sweep [OUTDIR]    (on a GPU; SWEEP_S=seconds bounds the run, default 150)

Question: chapter 31_weight_quant's dequantizing GEMV (`solutions/quant.py`, `quant_gemv_kernel`) takes a config
reasoned from the bf16 GEMV's (4 rows, 32 elements a thread), not measured. At the decode step's shapes, the
LM head first (a third of a step's bytes), how close does each config come to the 8-bit weight's floor, and
how does the best compare with chapter 05_projections's bf16 GEMV on the bf16 weight (`gemv_kernel`, its config)?
Method: rows per program 2-32, columns per step 256-2048, 16-64 elements a thread (which sets num_warps);
int8 and fp8 e4m3 (sm_89+) with a scale per row; each config timed as the course times
(`benchmark.time_calls`: a CUDA graph over enough weights to pass L2). Floor: the weight's bytes, its
scales, x and y at the copy bandwidth (`benchmark.ceiling_gbps`, a copy's read + write rate: the floor of a
read-mostly kernel, which a GEMV can beat). Writes OUTDIR/quant_gemv_sweep_<gpu>_<date>.json.
Result: NVIDIA H200, 2026-12-05 (lab/results/quant_gemv_sweep_nvidia-h200_2026-12-05.json; SWEEP_S=45 cut
the sweep at 37 to 46 configs a case). The LM head (248,320 x 1,024): the first pick, 4 rows in steps of
1,024, took 108.3 us (int8) and 104.8 us (fp8) against a floor of 60.1 us; 16 rows in steps of 256 on 4 warps
took 75.1 us (80% of the floor) and 68.2 us (88%), where chapter 05_projections's bf16 GEMV reads the bf16
head in 114.3 us. The K = 1,024 projections: 4 rows in steps of 512 on 2 warps, 0.86x the first pick's time on
average over the three shapes and both formats; K = 2,048 and 3,584: 2 rows in steps of 2,048 on 4 warps,
0.92x. Those small GEMVs stay at 18-46% of their floors (0.5-2 us of bytes, 2.6-5.1 us a call).
Verdict: adopted in solutions/quant.py, `gemv_config`: the three configs above. The LM head meets the 75% goal;
the small projections do not, and their time is the launch and ramp-up, not the bytes.
"""
import os
import time

import torch

from lab import common

SHAPES = [(248320, 1024, "LM head"), (8224, 1024, "DeltaNet in_proj"), (7168, 1024, "gate|up"),
          (5120, 1024, "attention q|gate|k|v"), (1024, 3584, "down"), (1024, 2048, "o_proj / out_proj")]


def weight_sets(N, K, fmt):
    """Copies of an 8-bit [N, K] weight with its row scales, x and y, enough to pass L2."""
    from tritonllm_course.reference.quant import quantize
    q0, s0, _ = quantize(0.02 * torch.randn(N, K, device="cuda"), fmt)
    x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
    return [{"x": x, "w": q0 if i == 0 else q0.clone(), "s": s0, "y": torch.empty(N, device="cuda",
                                                                                 dtype=torch.bfloat16)}
            for i in range(common.copies_past_l2(N * K))]


def space(N, K):
    import triton
    widest = max(256, triton.next_power_of_2(K))
    for bn in (2, 4, 8, 16, 32):
        for bk in (256, 512, 1024, 2048):
            for per_thread in (16, 32, 64):
                nw = bn * bk // (32 * per_thread)
                if bk <= widest and 1 <= nw <= 16:
                    yield bn, bk, nw


def main(out):
    import triton
    common.setup()
    from tritonllm_course import kernels
    from tritonllm_course.measure.benchmark import ceiling_gbps
    from tritonllm_course.triton_helpers import FP8_CAPABILITY
    quant, lin = kernels.load("quant", "solutions").module, kernels.load("linear", "solutions").module
    major, minor = torch.cuda.get_device_capability()
    formats = ["int8"] + (["fp8"] if 10 * major + minor >= FP8_CAPABILITY else [])
    ceiling = ceiling_gbps()
    budget, t0 = float(os.environ.get("SWEEP_S", "150")), time.time()
    path = common.result_path(out, "quant_gemv_sweep")
    res = common.header(ceiling_gbps=ceiling, floor="bytes at the copy bandwidth (read + write rate)", cases=[])
    for N, K, what in SHAPES:
        bf = {"x": torch.randn(K, device="cuda", dtype=torch.bfloat16),
              "y": torch.empty(N, device="cuda", dtype=torch.bfloat16)}
        cfg = lin.gemv_config(N, K)
        grid = (triton.cdiv(N, cfg["BLOCK_N"]),)
        bf16_us = common.best_time_calls(lambda x, w, y: lin.gemv_kernel[grid](x, w, y, N, K, **cfg),
                                         [{**bf, "w": w} for w in common.weight_copies(N, K)])
        for fmt in formats:
            if time.time() - t0 > budget:
                break
            sets = weight_sets(N, K, fmt)
            floor_us = (N * K + 4 * N + 2 * K + 2 * N) / ceiling / 1e3
            hand = quant.gemv_config(N, K, None)
            rows = []
            for bn, bk, nw in space(N, K):
                if time.time() - t0 > budget:
                    break
                g = (triton.cdiv(N, bn),)

                def call(x, w, s, y, g=g, bn=bn, bk=bk, nw=nw):
                    quant.quant_gemv_kernel[g](x, w, s, y, N, K, 1, GROUP=0, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw)
                try:
                    us = common.best_time_calls(call, sets)
                    rows.append({"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw, "us": us,
                                 "pct_of_floor": 100 * floor_us / us})
                except Exception as e:  # noqa: BLE001  (a config that does not compile is recorded)
                    rows.append({"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw, "error": common.error_text(e)})
            ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
            hand_row = next((r for r in ok if all(r[k] == hand[k] for k in ("BLOCK_N", "BLOCK_K", "num_warps"))),
                            None)
            case = {"shape": what, "N": N, "K": K, "format": fmt, "floor_us": floor_us, "bf16_gemv_us": bf16_us,
                    "bf16_floor_us": 2 * N * K / ceiling / 1e3, "hand": hand, "hand_row": hand_row,
                    "best": ok[:6], "all": rows}
            res["cases"].append(case)
            best = ok[0] if ok else None
            print(f"{what} {N}x{K} {fmt}: floor {floor_us:.2f} us, bf16 GEMV {bf16_us:.2f} us; hand "
                  f"{hand_row and round(hand_row['us'], 2)} us; best {best}", flush=True)
            common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
