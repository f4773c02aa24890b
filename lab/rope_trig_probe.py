"""RoPE's angles: read from a cos/sin table, or computed in the kernel with tl.cos / tl.sin? Time and accuracy.

    python -m lab.rope_trig_probe [OUTDIR]     (on a GPU; writes OUTDIR/rope_trig_<gpu>_<date>.json)

Question: the source article's §2.3 advises a cos/sin cache made ahead of time over computing the angles in
the kernel, since a decode step's position is fixed and recomputing the trigonometry would be wasted; its
§1.1 warns that trigonometry in fp16 drifts at long positions and that fp32 inside the kernel cures it.
At Qwen3.5-0.8B's shapes (8 query heads, 2 key heads, rotary_dim 64 of head_dim 256, theta 1e7, positions
up to max_position_embeddings = 262,144), which is faster, and how accurate is each against fp64?
Method: one small in-place kernel with chapter 06_rope's layout (grid (T,): one program per token, every head
as a [heads, 32] tile per half, fp32 arithmetic, one rounding on the store) in three forms, chosen at
compile time:
  - `cache fp32`, `cache bf16`: cos and sin tables [262144, 32] (one angle per pair: the course's own
    table repeats it for both halves of a row), built once from fp64 angles and rounded to the table's
    dtype; the kernel reads the position's row of each;
  - `trig fp32`: angle = position * inv_freq in fp32 (inv_freq from a 32-entry fp32 table), then tl.cos and
    tl.sin, core triton.language in triton 3.6 and 3.7 (fp32 and fp64 only: an fp16 argument raises);
  - `trig fp64`: the same in fp64, rounded to fp32 after the cos and sin.
Timed on bf16 q and k (two launches a call, as the model rotates them) at decode (T = 1, position 262,143)
and prompts of 128 and 2,048 tokens (positions 0..T-1), as the course times a kernel
(`benchmark.time_calls`: a CUDA graph replayed over copies of the inputs, best of 2 runs; at decode the
inputs are a few KB and every table row read comes from L2). Accuracy: fp32 q rotated at 8,192 positions
spread over 0..262,143, against the rotation in fp64 with exact angles, per band of positions. The check
runs every form under the interpreter against fp64 from the form's own angles or table values.
Result: NVIDIA H200, 2026-12-02 (lab/results/rope_trig_nvidia-h200_2026-12-02.json), q and k together.
Decode (T = 1, position 262,143): fp32 table 2.21 us, bf16 table 2.80, tl.cos/tl.sin in fp32 4.22, in
fp64 3.34 (fp32 trigonometry of a large angle takes the slow argument reduction). 128 tokens: 2.89, 3.16,
3.17, 3.82 us; 2,048 tokens: 6.00, 6.27, 6.18, 6.92 us: but fp64, within 9.5% of each other at 128 tokens,
4.5% at 2,048. Accuracy against fp64 (relative error of the rotated q): the fp32 table and fp64 trigonometry
exact to fp32; the bf16 table 1.1e-3 to 1.3e-3 at every position; fp32 trigonometry 1e-5 below position
4,096, 1e-4 up to 32,768 and 7e-4 beyond (max abs error 0.028), as its angle loses bits with the position.
Verdict: nothing to adopt: the article's advice holds at decode: a table read beats the trigonometry by
1.2-1.9x there, and fp32 in-kernel angles drift past a bf16 table's error at long positions.
solutions/rope.py keeps its table, in the activation dtype as transformers keeps it (the tokens must match
the reference's).
"""
import torch
import triton
import triton.language as tl

from lab import common

VARIANTS = {"cache fp32": 0, "cache bf16": 0, "trig fp32": 1, "trig fp64": 2}   # name: TRIG
TOKENS = (1, 128, 2048)                 # decode, a 128-token prompt, a 2,048-token prompt
BANDS = (4096, 32768, 262144)           # accuracy over positions [previous band, band)


@triton.jit
def rope_probe_kernel(x_ptr, cos_ptr, sin_ptr, freq_ptr, pos_ptr, heads, head_dim, half,
                      TRIG: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    """x [T, heads, head_dim] rotated in place (pairs i, i + half); TRIG 0: cos/sin from the [P, half] tables,
    1: from position * freq in fp32, 2: in fp64 (freq [half] in that dtype)."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_R)
    in_half = i < half
    pos = tl.load(pos_ptr + t).to(tl.int64)
    if TRIG == 0:
        c = tl.load(cos_ptr + pos * half + i, mask=in_half, other=0.0).to(tl.float32)
        s = tl.load(sin_ptr + pos * half + i, mask=in_half, other=0.0).to(tl.float32)
    elif TRIG == 1:
        angle = pos.to(tl.float32) * tl.load(freq_ptr + i, mask=in_half, other=0.0)        # rounded to fp32
        c = tl.cos(angle)
        s = tl.sin(angle)
    else:
        angle = pos.to(tl.float64) * tl.load(freq_ptr + i, mask=in_half, other=0.0)        # fp64
        c = tl.cos(angle).to(tl.float32)
        s = tl.sin(angle).to(tl.float32)
    first = t * heads * head_dim + h[:, None] * head_dim + i[None, :]                      # [BLOCK_H, BLOCK_R]
    mask = (h < heads)[:, None] & in_half[None, :]
    x1 = tl.load(x_ptr + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + first + half, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + first, (x1 * c[None, :] - x2 * s[None, :]).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(x_ptr + first + half, (x2 * c[None, :] + x1 * s[None, :]).to(x_ptr.dtype.element_ty), mask=mask)


def inv_freq(rotary_dim: int, theta: float, device=None) -> torch.Tensor:
    """theta^(-2i / rotary_dim), i < rotary_dim / 2, in fp64."""
    return theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim)


def tables(positions: int, rotary_dim: int, theta: float, device) -> dict:
    """What each form reads: {name: (cos table, sin table, freq)}; the tables from fp64 angles, rounded."""
    w = inv_freq(rotary_dim, theta, device)
    angles = torch.arange(positions, dtype=torch.float64, device=device)[:, None] * w      # [P, half]
    out = {}
    for name, dtype in (("cache fp32", torch.float32), ("cache bf16", torch.bfloat16)):
        out[name] = (angles.cos().to(dtype), angles.sin().to(dtype), w.float())
    del angles
    out["trig fp32"] = (w.float(), w.float(), w.float())       # the tables are not read: any pointer
    out["trig fp64"] = (w, w, w)
    return out


def rotate(x: torch.Tensor, pos: torch.Tensor, tabs: dict, variant: str, rotary_dim: int) -> torch.Tensor:
    """Rotate x [T, heads, head_dim] in place at positions pos [T] with the form `variant`."""
    T, heads, head_dim = x.shape
    half = rotary_dim // 2
    cos, sin, freq = tabs[variant]
    block_h, block_r = triton.next_power_of_2(heads), triton.next_power_of_2(half)
    rope_probe_kernel[(T,)](x, cos, sin, freq, pos, heads, head_dim, half, TRIG=VARIANTS[variant],
                            BLOCK_H=block_h, BLOCK_R=block_r, num_warps=min(8, max(1, block_h * block_r // 256)))
    return x


def rotate_fp64(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """The rotation in fp64 with given cos, sin [T, half]; the dims past rotary_dim unchanged."""
    half = rotary_dim // 2
    x = x.double()
    x1, x2 = x[..., :half], x[..., half:rotary_dim]
    c, s = c.double()[:, None], s.double()[:, None]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, x[..., rotary_dim:]], dim=-1)


def own_angles(pos: torch.Tensor, tabs: dict, variant: str):
    """(cos, sin) [T, half] of the arithmetic each form does: its table's values, or cos and sin in fp64 of
    the angle as the form rounds it."""
    cos, sin, freq = tabs[variant]
    if VARIANTS[variant] == 0:
        return cos[pos.long()], sin[pos.long()]
    angle = (pos.float()[:, None] * freq).double() if VARIANTS[variant] == 1 else pos.double()[:, None] * freq
    return angle.cos(), angle.sin()


def check(device="cpu"):
    """Odd sizes under the interpreter (3 heads, head_dim 14, rotary_dim 10: halves of 5 in tiles of 8), fp32 x,
    positions up to 299,999: each form against fp64 from its own angles or table values (the largest
    relative error); the dims past rotary_dim must come back bit-unchanged (inf if not)."""
    gen = torch.Generator().manual_seed(0)
    positions, rot = 300_000, 10
    tabs = tables(positions, rot, 1e7, device)
    pos = torch.tensor([0, 1, 7, 4097, 65_537, positions - 1], device=device)
    worst = 0.0
    for variant in VARIANTS:
        x0 = torch.randn(len(pos), 3, 14, generator=gen).to(device)
        x = rotate(x0.clone(), pos, tabs, variant, rot)
        want = rotate_fp64(x0, *own_angles(pos, tabs, variant), rot)
        worst = max(worst, common.rel_err(x[..., :rot], want[..., :rot]))
        if not torch.equal(x[..., rot:], x0[..., rot:]):
            worst = float("inf")
    return worst


def accuracy(tabs: dict, rotary_dim: int, theta: float, max_positions: int, heads: int, head_dim: int) -> list:
    """Each form on fp32 q at 8,192 positions spread over [0, max_positions), against fp64 with exact angles:
    the relative error of the rotated dims and the largest absolute error, per band of positions."""
    torch.manual_seed(1)
    pos = torch.linspace(0, max_positions - 1, 8192, dtype=torch.float64, device="cuda").round().long()
    x0 = torch.randn(len(pos), heads, head_dim, device="cuda")
    exact = pos.double()[:, None] * inv_freq(rotary_dim, theta, "cuda")
    want = rotate_fp64(x0, exact.cos(), exact.sin(), rotary_dim)[..., :rotary_dim]
    rows = []
    for variant in VARIANTS:
        got = rotate(x0.clone(), pos, tabs, variant, rotary_dim)[..., :rotary_dim]
        low = 0
        for high in BANDS:
            band = (pos >= low) & (pos < high)
            rows.append({"variant": variant, "positions": [low, high],
                         "rel_err": common.rel_err(got[band], want[band]),
                         "max_abs_err": (got[band].double() - want[band]).abs().max().item()})
            low = high
    return rows


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B as C
    path = common.result_path(out, "rope_trig")
    rot, P, theta = C.rotary_dim, C.max_position_embeddings, C.rope_theta
    res = common.header(dtype="bfloat16", triton=triton.__version__, torch=torch.__version__, theta=theta,
                        rotary_dim=rot, head_dim=C.head_dim, max_positions=P, q_heads=C.num_attention_heads,
                        k_heads=C.num_key_value_heads, check_rel_err=check("cuda"), accuracy=[], rows=[])
    tabs = tables(P, rot, theta, "cuda")
    res["accuracy"] = accuracy(tabs, rot, theta, P, C.num_attention_heads, C.head_dim)
    for row in res["accuracy"]:
        print(row, flush=True)
    common.save(path, res)
    bf = torch.bfloat16
    for T in TOKENS:
        pos = torch.tensor([P - 1], device="cuda") if T == 1 else torch.arange(T, device="cuda")
        qk_bytes = T * (C.num_attention_heads + C.num_key_value_heads) * C.head_dim * 2
        sets = [{"q": torch.randn(T, C.num_attention_heads, C.head_dim, device="cuda", dtype=bf),
                 "k": torch.randn(T, C.num_key_value_heads, C.head_dim, device="cuda", dtype=bf), "pos": pos}
                for _ in range(common.copies_past_l2(qk_bytes))]
        for variant in VARIANTS:
            def call(q, k, pos, variant=variant):
                rotate(q, pos, tabs, variant, rot)
                rotate(k, pos, tabs, variant, rot)
            table_bytes = T * rot * tabs[variant][0].element_size() if VARIANTS[variant] == 0 else 0
            row = {"variant": variant, "T": T, "position": int(pos[-1]), "launches": 2, "copies": len(sets),
                   "bytes": qk_bytes // C.head_dim * rot * 2 + table_bytes + T * 8,
                   "us": common.best_time_calls(call, sets)}
            common.keep_row(res, path, row)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
