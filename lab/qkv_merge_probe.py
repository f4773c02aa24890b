"""Is one merged input projection faster than its three or four separate projections, and by how much?

    python -m lab.qkv_merge_probe [OUTDIR]     (on a GPU; writes OUTDIR/qkv_merge_<gpu>_<date>.json)

Question: the source article's §2.2 says that merging the Q, K and V projections into one kernel made the
0.8B model's decode about 12% faster. Chapter 05_projections merges every group of projections that reads the same
input (attention q+gate | k | v, DeltaNet qkv | z | b | a, MLP gate | up). What does the merge save at
Qwen3.5-0.8B's shapes, decode (M = 1) and a 128-token prompt (M = 128), and where does it come from?
Method: each group as the checkpoint stores it (separate weights: 4096 + 512 + 512, 6144 + 2048 + 16 + 16
and 3584 + 3584 rows of K = 1024) against the merged weight chapter 05_projections runs (5120, 8224, 7168 rows). The
separate weights are row slices of the merged one (a row slice of a row-major matrix is contiguous), so
both forms read exactly the same bytes and compute the same outputs; what differs is the number of
launches. Two implementations: the course's kernels (`linear` of solutions/linear.py: the GEMV at M = 1,
the GEMM at M = 128, with their own configs) and cuBLAS (`torch.nn.functional.linear`). bf16; each form
timed as the course times a kernel (`benchmark.time_calls`: a CUDA graph replayed over copies of the
weights larger than L2, best of 2 runs), in us per group. The check: the merged outputs against the
separate ones (bit for bit for the course's GEMV, whose config is the same at every N here) and against
fp64. Then the saving in us per decode token: 6 attention, 18 DeltaNet and 24 MLP groups a token.
Result: NVIDIA H200, 2026-12-02 (lab/results/qkv_merge_nvidia-h200_2026-12-02.json). The merged form is
faster in every case, with the same bytes and, for the course's GEMV, bit-identical outputs. At decode,
the course's kernels: attention 4.43 against 7.96 us (44% saved), DeltaNet 6.14 against 11.43 us (46%),
gate/up 5.50 against 7.27 us (24%); cuBLAS saves 37-62% (5.54 against 13.84 us for attention). At
M = 128: 50-60% with the course's GEMM, 38-61% with cuBLAS. Over a decode token's 48 groups the merge
saves 159 us with the course's GEMVs (349 us with cuBLAS), about 17% of the one-kernel-per-operator
level's 0.955 ms a token (results/engine_nvidia-h200_2026-11-30/), which runs the merged weights, and 14% of
the 1.11 ms it would take unmerged (0.955 + 0.159): the article's "about 12%" (a saving over the unmerged
token) is the right size. Where it comes from: launches (each separate projection pays a launch and a partly
empty last wave for a few MB), not bytes, contrary to the article's explanation that q, k and v stay in registers (the
merged projection still writes them to memory).
Verdict: nothing to adopt (a measurement): the engine already merges every group at load
(tritonllm_course/engine/merged.py); chapter 05_projections shows these figures.
"""
import torch

from lab import common

# (name, rows of each weight the checkpoint stores, K, groups a decode token runs); the merged weight is
# their concatenation along N, in this order
GROUPS = [
    ("attention q+gate | k | v", (4096, 512, 512), 1024, 6),
    ("DeltaNet qkv | z | b | a", (6144, 2048, 16, 16), 1024, 18),
    ("MLP gate | up", (3584, 3584), 1024, 24),
]
TOKENS = (1, 128)          # decode and a 128-token prompt


def split_rows(w: torch.Tensor, parts) -> list[torch.Tensor]:
    """The separate weights as row slices of the merged [sum(parts), K] weight: contiguous views."""
    return list(torch.split(w, list(parts), dim=0))


def merged_call(project):
    """One launch: x @ W.T over the merged weight (`project(x, w, out)` returns the output)."""
    def call(x, w, y, **_):
        return project(x, w, y)
    return call


def separate_call(project, parts):
    """One launch per part, each into its own output; returns the outputs side by side (outside the timing)."""
    def call(x, w, ys, **_):
        return [project(x, wi, yi) for wi, yi in zip(split_rows(w, parts), ys)]
    return call


def check(device="cpu"):
    """Odd shapes under the interpreter, NaN-poisoned outputs, decode (M = 1, the GEMV) and prefill (M = 5,
    the GEMM): the largest relative error of the merged and the separate outputs against fp64, and the
    merged GEMV's slices bit-identical to the separate GEMVs (inf if not)."""
    from tritonllm_course import kernels
    lin = kernels.load("linear", "solutions").module
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for parts, K in [((37, 9, 9), 70), ((23, 11, 3, 3), 33)]:
        w = torch.randn(sum(parts), K, generator=gen).to(device)
        for M in (1, 5):
            x = torch.randn(M, K, generator=gen).to(device)
            want = x.double() @ w.double().T
            y = torch.full((M, sum(parts)), float("nan"), device=device)
            ys = [torch.full((M, n), float("nan"), device=device) for n in parts]
            y = merged_call(lin.linear)(x, w, y)
            ys = torch.cat(separate_call(lin.linear, parts)(x, w, ys), 1)
            worst = max(worst, common.rel_err(y, want), common.rel_err(ys, want))
            if M == 1 and not torch.equal(y, ys):
                worst = float("inf")
    return worst


def main(out):
    common.setup()
    import triton
    from tritonllm_course import kernels
    lin = kernels.load("linear", "solutions").module
    F = torch.nn.functional
    path = common.result_path(out, "qkv_merge")
    torch.manual_seed(0)
    res = common.header(dtype="bfloat16", triton=triton.__version__, torch=torch.__version__,
                        check_rel_err=check("cuda"), rows=[])
    # cuBLAS writes a fresh output (from the graph's memory pool): `out=` forms may add a copy kernel
    impls = {"triton": lambda x, w, y: lin.linear(x, w, y), "cuBLAS": lambda x, w, y: F.linear(x, w)}
    for name, parts, K, per_token in GROUPS:
        N = sum(parts)
        for M in TOKENS:
            sets = [{"x": torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
                     "w": 0.02 * torch.randn(N, K, device="cuda", dtype=torch.bfloat16),
                     "y": torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
                     "ys": [torch.empty(M, n, device="cuda", dtype=torch.bfloat16) for n in parts]}
                    for _ in range(common.copies_past_l2(N * K * 2))]
            for impl, project in impls.items():
                s = sets[0]
                merged = merged_call(project)(**s).clone()
                separate = torch.cat(separate_call(project, parts)(**s), 1)
                row = {"group": name, "parts": list(parts), "N": N, "K": K, "M": M, "impl": impl,
                       "groups_per_token": per_token, "launches_separate": len(parts),
                       "bytes": 2 * (N * K + M * K + M * N),
                       "merged_vs_separate_identical": bool(torch.equal(merged, separate)),
                       "merged_rel_err": common.rel_err(merged, s["x"].double() @ s["w"].double().T)}
                row["merged_us"] = common.best_time_calls(merged_call(project), sets)
                row["separate_us"] = common.best_time_calls(separate_call(project, parts), sets)
                row["ratio"] = row["separate_us"] / row["merged_us"]             # > 1: the merge is faster
                row["saving"] = 1 - row["merged_us"] / row["separate_us"]        # the share of time it removes
                res["rows"].append(row)
                print({k: row[k] for k in ("group", "M", "impl", "merged_us", "separate_us", "ratio")}, flush=True)
                common.save(path, res)
            del sets
    # what the merge saves a decode token (M = 1) and a 128-token prompt: every group of the model
    res["saved_us_per_pass"] = {f"{impl} M={M}": sum((r["separate_us"] - r["merged_us"]) * r["groups_per_token"]
                                                    for r in res["rows"] if r["impl"] == impl and r["M"] == M)
                                for impl in impls for M in TOKENS}
    print(res["saved_us_per_pass"])
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
