"""The attention layer's q/k prologue at long prompts: one program per token and head, or a tile of tokens?

    python -m lab.qk_prologue_tile_probe [OUTDIR]   (on a GPU; writes OUTDIR/qk_prologue_tile_probe_<gpu>_<date>.json;
                                                    PROMPTS="1024 4000" the prompt lengths)

Question: chapter 22_layer_fusion's `qk_norm_rope_cache_kernel` (q/k norm, RoPE and the KV cache write in one
kernel) runs one program per token and head: 10 heads x 4,000 = 40,000 programs of 4 warps at a 4,000-token
prompt, each moving one 512-byte row. In the fast level's prompt profile on an H100
(results/profile_nvidia-h100-80gb-hbm3_2026-12-06.json) it takes 50.3 us a call at 4,000 tokens and 13.1 us at
1,024, where its bytes (q, k and v read, q and the two cache rows written, 12 KB a token) take about 16 and 4 us at
3 TB/s: a third of the bandwidth, the programs too small to hide their own latency. Does a program that owns a
tile of BLOCK_T tokens of one head come nearer its bytes?
Method: `qk_norm_rope_cache_tiled_kernel` below: the same arithmetic on a [BLOCK_T, BLOCK_D] tile (each row's
statistic over its own head, its own position's cos and sin, a masked store per row), grid (cdiv(T, BLOCK_T), heads
+ kv heads). Qwen3.5-0.8B's shapes in bf16 (8 query and 2 KV heads of 256, rotary dims 64): q, k and v as views of
one [T, 5120] projection output (the engine's layout: token stride 5,120), positions 0..T-1, a cache of T rows. At
each T of PROMPTS: the course's kernel as its wrapper `qk_norm_rope_cache` launches it (without PDL's overlap, as
the tiled one runs) and the tiled one at BLOCK_T in (2, 4, 8, 16) on 4 and 8 warps, each timed as the course times
kernels (`benchmark.time_calls`: a CUDA graph replayed over copies of the inputs past L2), the outputs (q and both
caches) compared with the course kernel's. `check` runs the tiled kernel under the interpreter at odd shapes (T not
a multiple of BLOCK_T, a head dim not a power of two, positions out of order) with NaN-poisoned outputs against the
course kernel.
Result: not measured yet: `python -m lab.qk_prologue_tile_probe` on a GPU.
Verdict: not adopted yet: solutions/layer_fusion.py keeps one program per token and head until this probe has
timed the tile.
"""
import os

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course.reference import rope_cache

HEADS, KV_HEADS, HEAD_DIM, ROTARY = 8, 2, 256, 64      # Qwen3.5-0.8B's attention layers
TILES = [(bt, w) for bt in (2, 4, 8, 16) for w in (4, 8)]


@triton.jit
def qk_norm_rope_cache_tiled_kernel(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, q_out_ptr,
                                    k_cache_ptr, v_cache_ptr, sq_t, sq_h, sk_t, sk_h, sv_t, sv_h,
                                    T, H, KV, D, half, num_positions, max_len, eps,
                                    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """Program (i, r): head r of tokens i * BLOCK_T ... (i + 1) * BLOCK_T - 1, the course kernel's arithmetic row
    by row on a [BLOCK_T, BLOCK_D] tile."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)                              # [BLOCK_T] tokens
    r = tl.program_id(1)
    is_q = r < H
    kv = r - H
    d = tl.arange(0, BLOCK_D)
    in_row = d < D
    rot = d < 2 * half
    partner = tl.where(d < half, d + half, d - half)
    live = t < T
    pos = tl.load(pos_ptr + t, mask=live, other=-1).to(tl.int64)                       # [BLOCK_T]
    t64 = t.to(tl.int64)
    if is_q:
        rows = q_ptr + t64 * sq_t + r * sq_h                                            # [BLOCK_T] row starts
        w_ptr = qw_ptr
    else:
        rows = k_ptr + t64 * sk_t + kv * sk_h
        w_ptr = kw_ptr
    m_row = live[:, None] & in_row[None, :]                                             # [BLOCK_T, BLOCK_D]
    x = tl.load(rows[:, None] + d[None, :], mask=m_row, other=0.0).to(tl.float32)
    xp = tl.load(rows[:, None] + partner[None, :], mask=live[:, None] & rot[None, :], other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)                                 # [BLOCK_T]
    w = 1.0 + tl.load(w_ptr + d, mask=in_row, other=0.0).to(tl.float32)                # [BLOCK_D]
    wp = 1.0 + tl.load(w_ptr + partner, mask=rot, other=0.0).to(tl.float32)
    n = x * inv_rms[:, None] * w[None, :]
    n_p = xp * inv_rms[:, None] * wp[None, :]
    ok = live & (pos >= 0) & (pos < num_positions)                                      # [BLOCK_T]
    m_rot = ok[:, None] & rot[None, :]
    trig = pos[:, None] * 2 * half + d[None, :]                                         # [BLOCK_T, BLOCK_D]
    c = tl.load(cos_ptr + trig, mask=m_rot, other=float("nan")).to(tl.float32)
    s = tl.load(sin_ptr + trig, mask=m_rot, other=float("nan")).to(tl.float32)
    y = tl.where(rot[None, :], n * c + tl.where((d < half)[None, :], -n_p, n_p) * s, n)
    if is_q:
        dst = (t64[:, None] * H + r) * D + d[None, :]
        tl.store(q_out_ptr + dst, y.to(q_out_ptr.dtype.element_ty), mask=m_row)
    else:
        w_ok = m_row & ((pos >= 0) & (pos < max_len))[:, None]
        dst = (pos[:, None] * KV + kv) * D + d[None, :]
        tl.store(k_cache_ptr + dst, y.to(k_cache_ptr.dtype.element_ty), mask=w_ok)
        vrow = tl.load(v_ptr + t64[:, None] * sv_t + kv * sv_h + d[None, :], mask=w_ok)
        tl.store(v_cache_ptr + dst, vrow, mask=w_ok)


def course(**s) -> None:
    """Chapter 22_layer_fusion's kernel through its wrapper, launched without PDL's overlap (the host's reads of
    the positions are skipped while a graph is captured)."""
    from tritonllm_course import kernels
    from tritonllm_course.runtime import no_launch_overlap
    wrapper = kernels.load("layer_fusion", "solutions").module.qk_norm_rope_cache
    with no_launch_overlap():
        wrapper(s["q"], s["k"], s["v"], s["qw"], s["kw"], s["cos"], s["sin"], s["pos"], s["k_cache"],
                s["v_cache"], out=s["out"])


def tiled(block_t: int, warps: int):
    """The tiled kernel at BLOCK_T = block_t on `warps` warps, as a call on an input set."""
    def call(**s) -> None:
        q, k, v = s["q"], s["k"], s["v"]
        T, H, D = q.shape
        KV = k.shape[1]
        qk_norm_rope_cache_tiled_kernel[(triton.cdiv(T, block_t), H + KV)](
            q, k, v, s["qw"], s["kw"], s["cos"], s["sin"], s["pos"], s["out"], s["k_cache"], s["v_cache"],
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), T, H, KV, D,
            s["cos"].shape[1] // 2, s["cos"].shape[0], s["k_cache"].shape[0], 1e-6,
            BLOCK_T=block_t, BLOCK_D=triton.next_power_of_2(D), num_warps=warps)
    return call


def inputs(T: int, H: int, KV: int, D: int, rotary: int, dtype, device, gen, pos=None) -> dict:
    """One input set: q, k, v as views of a [T, 2 H D + 2 KV D] projection output ([q | gate | k | v], the
    engine's layout), the norms' weights, cos/sin tables of T positions, positions (default 0..T-1) and
    NaN-poisoned outputs (q_out and a T-row cache)."""
    width = 2 * H * D + 2 * KV * D
    proj = torch.randn(T, width, generator=gen, device=device).to(dtype)
    q = proj[:, :H * D].view(T, H, D)                                       # [T, H, D], token stride `width`
    k = proj[:, 2 * H * D:2 * H * D + KV * D].view(T, KV, D)
    v = proj[:, 2 * H * D + KV * D:].view(T, KV, D)
    cos, sin = rope_cache(T, rotary, dtype=dtype, device=device)           # [T, rotary] each
    nan = float("nan")
    return {"q": q, "k": k, "v": v,
            "qw": 0.1 * torch.randn(D, generator=gen, device=device).to(dtype),
            "kw": 0.1 * torch.randn(D, generator=gen, device=device).to(dtype),
            "cos": cos, "sin": sin,
            "pos": torch.arange(T, device=device) if pos is None else pos,
            "out": torch.full((T, H, D), nan, device=device, dtype=dtype),
            "k_cache": torch.full((T, KV, D), nan, device=device, dtype=dtype),
            "v_cache": torch.full((T, KV, D), nan, device=device, dtype=dtype)}


def _poisoned_copy(s: dict) -> dict:
    """`s` with fresh NaN-poisoned outputs (the inputs shared)."""
    return {**s, **{name: torch.full_like(s[name], float("nan")) for name in ("out", "k_cache", "v_cache")}}


def largest_gap(a: dict, b: dict) -> float:
    """The largest relative error between the outputs of two runs (q, k cache, v cache); inf where either holds
    a NaN (a row left unwritten)."""
    worst = 0.0
    for name in ("out", "k_cache", "v_cache"):
        x, y = a[name], b[name]
        if torch.isnan(x).any() or torch.isnan(y).any():
            return float("inf")
        worst = max(worst, common.rel_err(x, y))
    return worst


def check(device="cpu") -> float:
    """The tiled kernel against the course's at odd shapes: 37 tokens (not a multiple of BLOCK_T), 3 query and 2
    KV heads of 40 (BLOCK_D 64, masked), 16 rotary dims, positions reversed, fp32, NaN-poisoned outputs. The
    largest relative error over BLOCK_T in (1, 4, 16)."""
    gen = torch.Generator(device=device).manual_seed(0)
    T = 37
    base = inputs(T, 3, 2, 40, 16, torch.float32, device, gen, pos=torch.arange(T - 1, -1, -1, device=device))
    want = _poisoned_copy(base)
    course(**want)
    worst = 0.0
    for block_t in (1, 4, 16):
        got = _poisoned_copy(base)
        tiled(block_t, 4)(**got)
        worst = max(worst, largest_gap(got, want))
    return worst


def main(out):
    common.setup()
    prompts = [int(p) for p in os.environ.get("PROMPTS", "1024 4000").split()]
    path = common.result_path(out, "qk_prologue_tile_probe")
    res = common.header(check=check("cuda"), prompts=prompts, rows=[])
    common.save(path, res)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for T in prompts:
        nbytes = T * (2 * HEADS + 4 * KV_HEADS) * HEAD_DIM * 2     # q, k, v read; q and the two cache rows written
        sets = [inputs(T, HEADS, KV_HEADS, HEAD_DIM, ROTARY, torch.bfloat16, "cuda", gen)
                for _ in range(common.copies_past_l2(nbytes))]
        want = _poisoned_copy(sets[0])
        course(**want)
        row = {"T": T, "bytes": nbytes, "course_us": common.best_time_calls(course, sets), "tiled": []}
        for block_t, warps in TILES:
            got = _poisoned_copy(sets[0])
            call = tiled(block_t, warps)
            call(**got)
            row["tiled"].append({"BLOCK_T": block_t, "num_warps": warps, "us": common.best_time_calls(call, sets),
                                 "rel_err_vs_course": largest_gap(got, want)})
        common.keep_row(res, path, row)
    return res


if __name__ == "__main__":
    main(common.out_dir())
