"""Does FlashDecoding gain from loading the cache's past rows before the PDL wait?

    python -m lab.flash_decoding_prefetch_probe [OUTDIR]   (on an sm_90 GPU; writes
                                                            OUTDIR/flash_decoding_prefetch_probe_<gpu>_<date>.json)

Question: under PDL, FlashDecoding's split kernel waits at its top (`pdl_enter`), so nothing of it overlaps
the kernel before it, and its 12 launches a token cost 45 us at 128 cached tokens against a 0.5 us floor
(`pdl_step_profile`, 2026-12-02). Every cache row but the newest was written by an earlier step, and a step starts
with a plainly launched kernel (the embedding), so those rows, and the length itself (advanced by the
step before), are safe to read before the wait; only q and the newest row are this step's. Loading a
split's first block of past keys and values before the wait: does the attention layer get shorter?
Method: `prefetch_split_kernel` below has the split kernel's signature and arithmetic; before the wait it
reads the length and its first BLOCK_N rows of K and V, masked to the rows before the newest; after it, q
and the newest row where the block holds it (merged into the tile with a select), then the block's scores
and the rest of the split as the course's kernel does. The engine's fast decode step of Qwen3.5-0.8B
(random weights of the real shapes, bf16, its CUDA graph, PDL) at 128 and 4,096 cached tokens, with the
course's split kernel and with this one (the wrapper's kernel swapped in `solutions/flash_decoding.py`'s
module), us per token by CUDA events over 64 replays, alternated twice; the greedy tokens of both.
Result: NVIDIA H200, 2026-12-02 (lab/results/flash_decoding_prefetch_probe_nvidia-h200_2026-12-02.json), us
per token at 128 / 4,096 cached tokens, two runs each: the course's split kernel 629.4, 624.8 / 654.8, 653.9;
with the first block before the wait 629.8, 631.2 / 657.7, 657.7; the same greedy tokens.
Verdict: not adopted: no gain (a split reads one or a few blocks; its time is the wait and the chain after
it, not the loads): solutions/flash_decoding.py keeps its kernel.
"""
import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course import kernels
from tritonllm_course.triton_helpers import pdl_launch_dependents, pdl_wait

online_softmax_update = kernels.load("attention", "solutions").module.online_softmax_update    # chapter 08_attention's

CONTEXTS = (128, 4096)


@triton.jit
def _rows_per_split(length, num_splits, BLOCK_N: tl.constexpr):
    # as solutions/flash_decoding.py's `_chunk_rows`: cdiv(length, splits), at least one block
    return tl.maximum(tl.cdiv(length, num_splits), BLOCK_N)


@triton.jit
def prefetch_split_kernel(q_ptr, k_cache_ptr, v_cache_ptr, length_ptr, acc_ptr, m_ptr, l_ptr,
                          max_len, num_splits, KV, D, scale_log2e, G: tl.constexpr,
                          BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                          PDL: tl.constexpr = False):
    if PDL:
        pdl_launch_dependents()
    g = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.minimum(tl.load(length_ptr), max_len)       # the step before advanced it: safe before the wait
    chunk = _rows_per_split(length, num_splits, BLOCK_N)
    start = split * chunk
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    h_ok, d_ok = h < G, d < D
    n = start + tl.arange(0, BLOCK_N)
    end = tl.minimum(start + chunk, length)
    newest = length - 1                                     # this step's row: written by the kernel before
    offs = (n.to(tl.int64) * KV + g)[:, None] * D + d[None, :]                          # [BLOCK_N, BLOCK_D]
    past = ((n < end) & (n < newest))[:, None] & d_ok[None, :]
    k = tl.load(k_cache_ptr + offs, mask=past, other=0.0)
    v = tl.load(v_cache_ptr + offs, mask=past, other=0.0)
    if PDL:
        pdl_wait()
    if start < length:
        now = ((n == newest) & (n < end))[:, None] & d_ok[None, :]
        k = tl.where(now, tl.load(k_cache_ptr + offs, mask=now, other=0.0), k)
        v = tl.where(now, tl.load(v_cache_ptr + offs, mask=now, other=0.0), v)
        q = tl.load(q_ptr + (g * G + h)[:, None] * D + d[None, :], mask=h_ok[:, None] & d_ok[None, :],
                    other=0.0)                                                          # [BLOCK_H, BLOCK_D]
        m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        l = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale_log2e
        s = tl.where((n < end)[None, :], s, float("-inf"))
        m, l, acc = online_softmax_update(m, l, acc, s, v)
        for n0 in range(start + BLOCK_N, end, BLOCK_N):     # the rest of the split, as the course's kernel
            nb = n0 + tl.arange(0, BLOCK_N)
            nb_ok = nb < end
            ob = (nb.to(tl.int64) * KV + g)[:, None] * D + d[None, :]
            kv_mask = nb_ok[:, None] & d_ok[None, :]
            kb = tl.load(k_cache_ptr + ob, mask=kv_mask, other=0.0)
            sb = tl.dot(q, tl.trans(kb), input_precision="ieee") * scale_log2e
            sb = tl.where(nb_ok[None, :], sb, float("-inf"))
            vb = tl.load(v_cache_ptr + ob, mask=kv_mask, other=0.0)
            m, l, acc = online_softmax_update(m, l, acc, sb, vb)
        part = (g * G + h) * num_splits + split
        tl.store(m_ptr + part, m, mask=h_ok)
        tl.store(l_ptr + part, l, mask=h_ok)
        tl.store(acc_ptr + part.to(tl.int64)[:, None] * D + d[None, :], acc, mask=h_ok[:, None] & d_ok[None, :])


def swapped(fd, use_prefetch: bool):
    """solutions/flash_decoding.py's module with its split kernel set to this probe's (or its own)."""
    if not hasattr(fd, "_course_split_kernel"):
        fd._course_split_kernel = fd.flash_decoding_split_kernel
    fd.flash_decoding_split_kernel = prefetch_split_kernel if use_prefetch else fd._course_split_kernel


def engine_us(use_prefetch: bool, context: int, tokens: int = 64) -> dict:
    from tritonllm_course import kernels
    fd = kernels.load("flash_decoding", "solutions").module
    swapped(fd, use_prefetch)
    try:
        return common.fast_decode_us(context, tokens)
    finally:
        swapped(fd, False)


def check() -> float:
    """The prefetching split kernel through the course's wrapper against the fp64 reference, at odd cache
    lengths (the newest row in the first block and past it, one block, several splits), outputs poisoned;
    runs anywhere (under the interpreter the PDL calls are no-ops)."""
    from tritonllm_course import kernels
    from tritonllm_course import reference as R
    fd = kernels.load("flash_decoding", "solutions").module
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    H, KV, D, max_len = 4, 2, 32, 77
    worst = 0.0
    swapped(fd, True)
    try:
        for length in (1, 5, 16, 17, 40, 77):
            q = torch.randn(H, D, generator=gen).to(device)
            kc, vc = (torch.randn(max_len, KV, D, generator=gen).to(device) for _ in range(2))
            out = torch.full((H, D), float("nan"), device=device)
            fd.flash_decoding(q, kc, vc, length, D ** -0.5, out=out)
            ref = R.decode_attention(q.double(), kc.double(), vc.double(), length, D ** -0.5)
            worst = max(worst, common.rel_err(out.cpu(), ref.cpu()))
    finally:
        swapped(fd, False)
    return worst


def main(out):
    common.setup()
    res = common.header(check_rel_err=check(), engine={})
    path = common.result_path(out, "flash_decoding_prefetch_probe")
    for context in CONTEXTS:
        for rep in range(2):
            for use in (False, True):
                key = f"{'prefetch' if use else 'course'} @ {context} #{rep}"
                try:
                    res["engine"][key] = engine_us(use, context)
                except Exception as e:
                    res["engine"][key] = {"error": common.error_text(e)}
                r = res["engine"][key]
                print(key, r.get("us_per_token", r), flush=True)
                common.save(path, res)
    res["tokens_equal"] = {c: res["engine"].get(f"prefetch @ {c} #0", {}).get("tokens")
                           == res["engine"].get(f"course @ {c} #0", {}).get("tokens") for c in CONTEXTS}
    print("tokens equal:", res["tokens_equal"], flush=True)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
