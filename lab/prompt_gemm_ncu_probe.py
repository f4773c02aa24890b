"""What holds the 128-token prompt's GEMMs back, and how does cuBLAS get ahead of them? Nsight Compute's view.

    python -m lab.prompt_gemm_ncu_probe [OUTDIR]   (on a GPU with `ncu` on the PATH; writes
                                                    OUTDIR/prompt_gemm_ncu_probe_<gpu>_<date>.json)

Question: at 128 tokens the prompt's three GEMM slots take about half of its kernel time (chapter 20_profile),
each call several times the time its weights' bytes need, and the GEMM + residual trails cuBLAS
(`lab/prompt_gemm_sweep.py`). Every tile tried for it lands near the same time (`lab/prefill_probe.py`): 64 or
128 programs, split-K or not. Are these kernels bound by memory, by the tensor cores, or by latency, and what
does cuBLAS's kernel do differently?
Method: one process (`--target`) calls each of three GEMMs of Qwen3.5-0.8B's prompt at M = 128 in bf16 three
times, the engine's kernel and then cuBLAS on the same operands: the GEMM + residual of o_proj / out_proj
(1,024 x 2,048: `linear_residual`, solutions/layer_fusion.py, against `torch.addmm`), the DeltaNet in-projection
(8,224 x 1,024: `linear`, solutions/linear.py, against `torch.matmul`) and gate/up + SwiGLU (2 x 3,584 x 1,024:
`gate_up_swiglu_merged`, solutions/norm_fusion.py, against one `torch.matmul` with the stacked weight, without
the SwiGLU). `ncu --clock-control none` profiles the GEMMs' launches (sections SpeedOfLight, MemoryWorkloadAnalysis,
WarpStateStats, Occupancy, LaunchStats, SchedulerStats), flushing the caches before each replayed pass (its
default), so every launch reads its operands from HBM, both sides alike; `parse` keeps, per launch, the kernel,
its grid and block, and the metrics.
Result: NVIDIA H100 80GB HBM3, 2026-12-07 (lab/results/prompt_gemm_ncu_probe_nvidia-h100-80gb-hbm3_2026-12-07.json;
its script was `target` below, run by hand). The GEMM + residual took 8.42 us in each of its three calls against
7.39-7.58 us for cuBLAS's `nvjet_sm90_tst_24x64_64x16_4x2_h_badd_TNN` (88 programs of 384 threads in clusters of
8, the residual added in its epilogue); the in-projection 10.37-10.53 us against 10.27-10.43 (clusters of 2);
gate/up + SwiGLU 10.53-10.62 us against 9.25-9.41 for the plain product (clusters of 2). Every one is
latency-bound, the course's kernels and cuBLAS's alike: DRAM throughput 18-20% of its peak at the GEMM +
residual and 42-50% at the other two, 6-15% achieved occupancy (one program an SM), and no warp eligible to
issue in 74-89% of the scheduler's cycles. cuBLAS's lead at the GEMM + residual comes with its clusters of 8
programs, which can share one load of x among them (TMA multicast); the course's kernels run without clusters
(Cluster Size 0). Triton's `num_ctas` launch option, timed since (`lab/gemm_clusters_probe.py`), gave no tile a
lead beyond the run's spread: its clusters share no load.
Verdict: nothing adopted: `gemm_residual_config` (solutions/layer_fusion.py) keeps its 64 x 16 tiles at 128
tokens; the in-projection is level with cuBLAS; gate/up + SwiGLU is behind cuBLAS's product alone by less than
the separate SwiGLU a cuBLAS path would add (1.67 us a call at 128 tokens on an H100:
results/profile_nvidia-h100-80gb-hbm3_2026-12-06.md). A 128-token prompt's GEMMs wait on latency, not bytes; clusters
through `num_ctas` did not help (`lab/gemm_clusters_probe.py`).
"""
import re
import shutil
import subprocess
import sys

from lab import common

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "WarpStateStats", "Occupancy", "LaunchStats",
            "SchedulerStats")
KEEP = ("Duration", "DRAM Throughput", "L2 Cache Throughput", "Memory Throughput", "Compute (SM) Throughput",
        "Achieved Occupancy", "No Eligible", "Warp Cycles Per Issued Instruction", "Registers Per Thread",
        "L2 Hit Rate", "SM Frequency", "Cluster Size", "Dynamic Shared Memory Per Block")
M = 128
CASES = (("GEMM + residual, 1024 x 2048", 1024, 2048, "res"), ("DeltaNet in-projection, 8224 x 1024", 8224, 1024,
         "plain"), ("gate/up + SwiGLU, 7168 x 1024", 7168, 1024, "gated"))


def target() -> None:
    """The profiled process: each case's course kernel, then cuBLAS, three times each."""
    import torch
    from tritonllm_course import kernels
    layer = kernels.load("layer_fusion", "solutions").module
    linear = kernels.load("linear", "solutions").module
    fusion = kernels.load("norm_fusion", "solutions").module
    torch.manual_seed(0)
    for _, N, K, kind in CASES:
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)                      # [M, K]
        w = (0.02 * torch.randn(N, K, device="cuda")).to(torch.bfloat16)             # [N, K]
        res = torch.randn(M, N, device="cuda").to(torch.bfloat16)                    # [M, N]
        for _ in range(3):
            if kind == "res":
                layer.linear_residual(x, w, res)
                torch.addmm(res, x, w.T)
            elif kind == "plain":
                linear.linear(x, w)
                torch.matmul(x, w.T)
            else:
                fusion.gate_up_swiglu_merged(x, w)
                torch.matmul(x, w.T)
    torch.cuda.synchronize()


def parse(text: str) -> list[dict]:
    """ncu's text report -> one dict per launch: kernel, grid, block and the KEEP metrics ("name (unit)" -> value)."""
    launches, head = [], re.compile(r"^  (\S+) \(([\d, ]+)\)x\(([\d, ]+)\), Context")
    for line in text.splitlines():
        if m := head.match(line):
            launches.append({"kernel": m[1], "grid": [int(v) for v in m[2].split(",")],
                             "block": [int(v) for v in m[3].split(",")], "metrics": {}})
        elif launches and (m := re.match(r"^    (\S.*?)\s{2,}(\S+)?\s+([\d,.]+)$", line)):
            name, unit, value = m[1].strip(), m[2] or "", float(m[3].replace(",", ""))
            if name in KEEP:
                launches[-1]["metrics"][f"{name} ({unit})" if unit else name] = value
    return launches


def main(out):
    if shutil.which("ncu") is None:
        raise SystemExit("ncu is not on the PATH: this probe needs Nsight Compute")
    common.setup()
    path = common.result_path(out, "prompt_gemm_ncu_probe")
    cmd = ["ncu", "--clock-control", "none", "--kernel-name", "regex:gemm|nvjet|cutlass|sm90",
           *[a for s in SECTIONS for a in ("--section", s)],
           sys.executable, "-m", "lab.prompt_gemm_ncu_probe", "--target"]
    report = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    res = common.header(command=" ".join(cmd[:-4]), cases=[c[0] for c in CASES], launches=parse(report))
    common.save(path, res)
    for launch in res["launches"]:
        print(launch["kernel"][:60], launch["grid"], launch["metrics"].get("Duration (us)"), flush=True)
    return res


if __name__ == "__main__":
    if sys.argv[1:] == ["--target"]:
        target()
    else:
        main(common.out_dir())
