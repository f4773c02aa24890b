"""Choosing the next token (operator 17): a two-stage argmax, and a sampler built on it (chapter 12_sampling).

Greedy decoding is an argmax over the 248,320 logits of the last position. One program per row would
leave 131 of the H200's 132 SMs idle and read 0.5 MB serially, so the argmax runs in two stages:
  1. `argmax_partial_kernel`: the row is cut into `n_blocks` chunks; each program reduces one chunk to
     its (largest value, first index holding it);
  2. `argmax_merge_kernel`: one small program per row reduces the n_blocks pairs to the answer.
Ties go to the lowest index, as `torch.argmax` documents: a lane keeps its first maximum (strict `>`),
and each reduction keeps the smallest index among the keys equal to the maximum.

The comparisons run on integer keys (`order_key`): the fp32 bit pattern turned into an int32 with the
same order. Integers compare exactly the same on the GPU and in the CPU interpreter; -0.0 and +0.0
become one key (they are equal, so the first wins); NaN gets the largest key, so a NaN wins, at its
first index, as in torch.argmax (a float `max` ignores NaN on the GPU but propagates it in numpy).

Sampling: temperature, then top-k, then top-p (nucleus), as `reference.sampling.sample`. With the
Gumbel-max trick, a draw from softmax(z) is argmax(z + g) with g = -log(-log(u)), u ~ U(0, 1): the
sampler is the same two-stage argmax on perturbed keys, the noise made in the kernel from a seed
(Philox, `tl.rand`), the seed read from device memory. Top-k and top-p only decide which tokens may
win; both are a threshold on the logits, found without sorting: `search_threshold` narrows an
interval of keys, 32 candidate thresholds per pass (count and probability mass above each, summed over
the row in blocks of 512 logits, then merged per row), 7 passes from 2**32 keys to one. Every step is a
kernel on the device: no `.item()`, no host synchronisation, so a decode step that samples can be captured in a
CUDA graph (pass `seed` as a device tensor and bump it on the device after each step).
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter

KEY_NONE = tl.constexpr(-(2**31))      # below every real key: masked lanes, tokens filtered out
KEY_NAN = tl.constexpr(2**31 - 1)      # above +inf's key: NaN wins, as in torch.argmax
IDX_NONE = tl.constexpr(2**31 - 1)
INT32_LAST = tl.constexpr(2**31 - 1)   # candidate thresholds past the int32 keys are clamped here
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
TARGET_BLOCK = 2048                    # default elements per program: 122 programs for 248,320 logits
MAX_TILE = 2048
MAX_BLOCKS = 4096
SEARCH_CANDIDATES = 32                 # thresholds tried per pass: 5 bits of the key per pass
SEARCH_PASSES = 7                      # ceil(32 bits / 5)
SEARCH_BLOCK = 512                     # logits per search program: [32, 512] comparisons, 485 programs


@triton.jit
def order_key(x):
    """fp32 -> int32 with the same order (a < b exactly when key(a) < key(b)); -0.0 -> +0.0; NaN on top."""
    x = tl.where(x == 0.0, 0.0, x)
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)   # negative floats: larger magnitude, smaller key
    return tl.where(x != x, KEY_NAN, key)


@triton.jit
def gumbel(seed, offsets):
    """Gumbel(0, 1) noise from Philox: -log(-log(u)). u = 0 (odds 2**-31) gives -inf: that token can't win."""
    u = tl.rand(seed, offsets)
    return -tl.log(-tl.log(u))


@triton.jit
def first_max(keys, idx):
    """(largest key, smallest index holding it) of a block of (key, index) pairs."""
    # BEGIN EXERCISE: reduce to the maximum key, then to the lowest index among the keys equal to it
    raise NotImplementedError("exercise sampling.py, first_max: not implemented yet")
    # END EXERCISE


@triton.jit
def argmax_partial_kernel(logits_ptr, part_key_ptr, part_idx_ptr, bounds_ptr, seed_ptr, inv_temp,
                          vocab, chunk, n_blocks, TILE: tl.constexpr, SAMPLE: tl.constexpr, PDL: tl.constexpr = False):
    """Stage 1: program (row, block) reduces logits[row, block*chunk : (block+1)*chunk] to one pair.

    SAMPLE: the key of token i is that of logits[i] / T + gumbel(seed, row * vocab + i), and tokens whose
    logit key lies below bounds[row, 0] (the top-k / top-p threshold) are left out.
    """
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    lanes = tl.arange(0, TILE)
    best_key = tl.full([TILE], KEY_NONE, tl.int32)       # per lane: best key so far, and its index
    best_idx = tl.full([TILE], IDX_NONE, tl.int32)
    if SAMPLE:
        threshold = tl.load(bounds_ptr + 2 * row)
        seed = tl.load(seed_ptr)
    for start in range(block * chunk, block * chunk + chunk, TILE):
        idx = start + lanes
        mask = idx < vocab
        x = tl.load(logits_ptr + row * vocab + idx, mask=mask, other=0.0).to(tl.float32)
        key = order_key(x)
        if SAMPLE:
            noisy = order_key(x * inv_temp + gumbel(seed, (row * vocab + idx).to(tl.int32)))
            key = tl.where(key >= threshold, noisy, KEY_NONE)
        key = tl.where(mask, key, KEY_NONE)
        # BEGIN EXERCISE: update each lane's (best_key, best_idx); on a tie the lane keeps its earlier index
        raise NotImplementedError("exercise sampling.py, argmax_partial_kernel: not implemented yet")
        # END EXERCISE
    top, first = first_max(best_key, best_idx)
    tl.store(part_key_ptr + row * n_blocks + block, top)
    tl.store(part_idx_ptr + row * n_blocks + block, first)


@triton.jit
def argmax_merge_kernel(part_key_ptr, part_idx_ptr, out_ptr, n_blocks, logits_ptr, flag_ptr, vocab,
                        BLOCKS: tl.constexpr, FLAG: tl.constexpr = False, PDL: tl.constexpr = False):
    """Stage 2: one program per row reduces the row's n_blocks pairs and writes the index as int64.

    FLAG: also flag[row] = 2 if the picked token's logit is NaN, 1 if it is +-inf, else 0. That one logit
    tells whether the row held a NaN or a +inf, since those always win (`order_key`; the Gumbel draw adds
    finite noise): the decode step learns that its logits overflowed at no extra launch."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    row = tl.program_id(0).to(tl.int64)
    # BEGIN EXERCISE: load the row's pairs (masked past n_blocks), reduce them with first_max, store the index
    raise NotImplementedError("exercise sampling.py, argmax_merge_kernel: not implemented yet")
    # END EXERCISE
    if FLAG:
        tl.debug_barrier()                       # the index stored above, visible to every thread
        x = tl.load(logits_ptr + row * vocab + tl.load(out_ptr + row)).to(tl.float32)
        tl.store(flag_ptr + row, tl.where(x != x, 2, tl.where(tl.abs(x) == float("inf"), 1, 0)).to(tl.int64))


@triton.jit
def threshold_partial_kernel(logits_ptr, bounds_ptr, part_count_ptr, part_mass_ptr, part_max_ptr,
                             inv_temp, vocab, n_blocks, BLOCK: tl.constexpr, NT: tl.constexpr,
                             PDL: tl.constexpr = False):
    """One pass of the threshold search, stage 1: for NT candidate keys t_j spread over [lo, hi], this
    block's count of keys >= t_j and its mass sum(exp((x - m) / T)) over them, m the block's largest
    logit. One load and one [NT, BLOCK] comparison per program: no loop, so no serial memory round trips."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    lo = tl.load(bounds_ptr + 2 * row)
    hi = tl.load(bounds_ptr + 2 * row + 1)
    step = (hi - lo + NT) // NT                                     # ceil((hi - lo + 1) / NT)
    thresholds = tl.minimum(lo + tl.arange(0, NT).to(tl.int64) * step, INT32_LAST).to(tl.int32)  # [NT]
    idx = block * BLOCK + tl.arange(0, BLOCK)
    mask = idx < vocab
    x = tl.load(logits_ptr + row * vocab + idx, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp((x - tl.where(m > float("-inf"), m, 0.0)) * inv_temp)   # [BLOCK]; masked lanes: 0
    above = (order_key(x)[None, :] >= thresholds[:, None]) & mask[None, :]                     # [NT, BLOCK]
    out = (row * n_blocks + block) * NT + tl.arange(0, NT)
    tl.store(part_count_ptr + out, tl.sum(above.to(tl.int32), axis=1))
    tl.store(part_mass_ptr + out, tl.sum(tl.where(above, e[None, :], 0.0), axis=1))
    tl.store(part_max_ptr + row * n_blocks + block, m)


@triton.jit
def threshold_select_kernel(bounds_ptr, zbase_ptr, part_count_ptr, part_mass_ptr, part_max_ptr,
                            inv_temp, top_k, top_p, n_blocks, NT: tl.constexpr, BT: tl.constexpr,
                            TOP_P: tl.constexpr, FIRST: tl.constexpr, PDL: tl.constexpr = False):
    """One pass, stage 2 (one program per row): totals over the blocks, then keep the largest candidate
    that still satisfies the rule (count >= top_k, or mass >= top_p * mass at the phase's start) and
    narrow [lo, hi] to its step. The rule holds at lo and fails above the answer, so it holds on a prefix
    of the candidates (rounding is monotone, so the fp32 masses are too)."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, NT)
    base = row * n_blocks
    if TOP_P:
        top = tl.full([], float("-inf"), tl.float32)                # the row's largest logit so far
        total = tl.zeros([NT], dtype=tl.float32)                    # masses relative to exp(top / T)
        for b0 in range(0, n_blocks, BT):
            b = b0 + tl.arange(0, BT)
            bmask = b < n_blocks
            m_b = tl.load(part_max_ptr + base + b, mask=bmask, other=float("-inf"))
            new_top = tl.maximum(top, tl.max(m_b, axis=0))
            ref = tl.where(new_top > float("-inf"), new_top, 0.0)
            part = tl.load(part_mass_ptr + (base + b)[:, None] * NT + j[None, :], mask=bmask[:, None],
                           other=0.0)                              # [BT, NT]
            total = total * tl.exp((top - ref) * inv_temp) + \
                tl.sum(part * tl.exp((m_b - ref) * inv_temp)[:, None], axis=0)
            top = new_top
        if FIRST:                                                  # the phase starts: mass at lo = all kept
            zbase = tl.sum(tl.where(j == 0, total, 0.0), axis=0)
            tl.store(zbase_ptr + row, zbase)
        else:
            zbase = tl.load(zbase_ptr + row)
        ok = total >= top_p * zbase
    else:
        total = tl.zeros([NT], dtype=tl.int32)
        for b0 in range(0, n_blocks, BT):
            b = b0 + tl.arange(0, BT)
            part = tl.load(part_count_ptr + (base + b)[:, None] * NT + j[None, :],
                           mask=(b < n_blocks)[:, None], other=0)  # [BT, NT]
            total += tl.sum(part, axis=0)
        ok = total >= top_k
    lo = tl.load(bounds_ptr + 2 * row)
    hi = tl.load(bounds_ptr + 2 * row + 1)
    step = (hi - lo + NT) // NT
    chosen = tl.maximum(tl.sum(ok.to(tl.int64), axis=0) - 1, 0)
    new_lo = lo + chosen * step
    tl.store(bounds_ptr + 2 * row, new_lo)
    tl.store(bounds_ptr + 2 * row + 1, tl.minimum(new_lo + step - 1, hi))


@triton.jit
def gumbel_noise_kernel(seed_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, gumbel(tl.load(seed_ptr), offsets), mask=offsets < n)


# --- host wrappers ----------------------------------------------------------------------------------
def _rows(logits: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    validate.tensor(logits, "logits", dtype=validate.FLOATS)
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits has shape {list(logits.shape)}; expected [..., vocab] with vocab >= 1")
    vocab = logits.shape[-1]
    if vocab >= 2**31:
        raise ValueError(f"vocab {vocab} does not fit the kernels' int32 indices")
    return logits.reshape(-1, vocab), logits.numel() // vocab, vocab         # [rows, vocab]


def _split(vocab: int, num_blocks: int | None) -> tuple[int, int, int]:
    """(tile, chunk, n_blocks): each of n_blocks programs reads `chunk` logits, `tile` at a time."""
    if num_blocks is None:
        num_blocks = triton.cdiv(vocab, TARGET_BLOCK)
    num_blocks = validate.check_count(num_blocks, "num_blocks")   # "1" or 1.5 failed unnamed, True ran as 1
    if not 1 <= num_blocks <= MAX_BLOCKS:
        raise ValueError(f"num_blocks must be in [1, {MAX_BLOCKS}], got {num_blocks}")
    per_block = triton.cdiv(vocab, num_blocks)
    tile = min(MAX_TILE, triton.next_power_of_2(per_block))
    chunk = triton.cdiv(per_block, tile) * tile
    return tile, chunk, triton.cdiv(vocab, chunk)


def _seed_tensor(seed, device) -> torch.Tensor:
    if isinstance(seed, torch.Tensor):
        validate.tensor(seed, "seed", dtype=validate.INTS, shape=(1,), device=device.type)
        return seed
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int or a 1-element int64 tensor, got {type(seed).__name__}")
    seed = validate.check_seed(seed)          # the int64 the kernels read: 2**70 was an OverflowError, True a 1
    return torch.full((1,), seed, dtype=torch.int64, device=device)     # a fill on the device, no copy


def _reduce(flat, out_flat, tile, chunk, n_blocks, *, bounds=None, seed=None, inv_temp=1.0, flag=None):
    """The two launches of the argmax: greedy, or (with bounds and seed) the Gumbel-max draw; with `flag`
    ([rows] int64) the merge also says whether each row's picked logit was finite."""
    rows, vocab = flat.shape
    part_key = torch.empty(rows, n_blocks, dtype=torch.int32, device=flat.device)   # stage 1's pairs
    part_idx = torch.empty(rows, n_blocks, dtype=torch.int32, device=flat.device)
    sample = bounds is not None
    argmax_partial_kernel[(rows, n_blocks)](       # greedy never reads bounds_ptr / seed_ptr: any pointer
        flat, part_key, part_idx, bounds if sample else part_key, seed if sample else part_key, inv_temp,
        vocab, chunk, n_blocks, TILE=tile, SAMPLE=sample, num_warps=4, **pdl_args())
    argmax_merge_kernel[(rows,)](part_key, part_idx, out_flat, n_blocks, flat, out_flat if flag is None else flag,
                                 vocab, BLOCKS=triton.next_power_of_2(n_blocks), FLAG=flag is not None,
                                 num_warps=4, **pdl_args())


def argmax(logits: torch.Tensor, out: torch.Tensor | None = None,
           num_blocks: int | None = None, flag: torch.Tensor | None = None) -> torch.Tensor:
    """Index of the largest logit over the last dim, ties to the lowest index (as torch.argmax).

    logits:     [..., vocab] float, contiguous
    out:        [...] int64
    num_blocks: programs per row in stage 1 (default: one per 2048 logits, 122 for 248,320)
    flag:       [...] int64, or None: also write 2 where the picked logit is NaN, 1 where +-inf, else 0
    NaN: a NaN logit wins, at its first index, as in torch.argmax (the reference raises instead).
    """
    flat, rows, vocab = _rows(logits)
    device = validate.same_device(logits=logits)
    out = validate.output(out, "out", tuple(logits.shape[:-1]), torch.int64, device)
    flag = _flag(flag, out, logits)
    tile, chunk, n_blocks = _split(vocab, num_blocks)
    _reduce(flat, out.view(rows), tile, chunk, n_blocks, flag=None if flag is None else flag.view(rows))
    return out


def _flag(flag, out, logits):
    """The optional flag buffer, checked like `out` (its shape and device), none of them overlapping."""
    if flag is not None:
        validate.tensor(flag, "flag", dtype=(torch.int64,), shape=tuple(out.shape), device=out.device.type)
        validate.disjoint({"flag": flag}, {"out": out, "logits": logits})
    validate.disjoint({"out": out}, {"logits": logits})
    return flag


def search_threshold(flat: torch.Tensor, bounds: torch.Tensor, inv_temp: float, top_k: int = 0,
                     top_p: float = 1.0) -> torch.Tensor:
    """Narrow bounds[row] = [lo, hi] (int64 keys, in place) to the top-k or the top-p threshold key.

    flat: [rows, vocab] logits; with top_p < 1, the nucleus is taken among the keys >= lo (so a top-k
    threshold found first is respected) and bounds[:, 1] must be reset to INT32_MAX before the call.
    """
    rows, vocab = flat.shape
    n_blocks = triton.cdiv(vocab, SEARCH_BLOCK)
    nt, dev = SEARCH_CANDIDATES, flat.device
    count = torch.empty(rows, n_blocks, nt, dtype=torch.int32, device=dev)
    mass = torch.empty(rows, n_blocks, nt, dtype=torch.float32, device=dev)
    block_max = torch.empty(rows, n_blocks, dtype=torch.float32, device=dev)
    zbase = torch.empty(rows, dtype=torch.float32, device=dev)
    bt = min(512, triton.next_power_of_2(n_blocks))
    for p in range(SEARCH_PASSES):
        threshold_partial_kernel[(rows, n_blocks)](flat, bounds, count, mass, block_max, inv_temp, vocab,
                                                   n_blocks, BLOCK=SEARCH_BLOCK, NT=nt, num_warps=8, **pdl_args())
        threshold_select_kernel[(rows,)](bounds, zbase, count, mass, block_max, inv_temp, top_k, top_p,
                                         n_blocks, NT=nt, BT=bt, TOP_P=top_p < 1.0, FIRST=p == 0,
                                         num_warps=8, **pdl_args())
    return bounds


def sample(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           seed=0, out: torch.Tensor | None = None, num_blocks: int | None = None,
           flag: torch.Tensor | None = None) -> torch.Tensor:
    """Draw one token per row from softmax(filter(logits / temperature)), by Gumbel-max.

    logits:      [..., vocab] float, contiguous, finite (-inf allowed)
    temperature: > 0; 0 is greedy (`argmax`)
    top_k:       keep the k largest logits (0 = all); ties at the k-th value are all kept
    top_p:       then keep the smallest set of most likely tokens whose probability reaches top_p
                 (1.0 = all); tokens tied with the last one kept are kept too
    seed:        int, or a 1-element int64 tensor on the logits' device (what a CUDA graph needs: the
                 kernel reads it at run time); the noise of token i of row r is gumbel(seed, r*vocab + i)
    out:         [...] int64
    num_blocks:  programs per row of the final argmax (as in `argmax`)
    flag:        as in `argmax`: whether each row's drawn token has a NaN or +-inf logit (they always win)
    """
    validate.number(temperature, "temperature")
    if not (temperature == 0 or 1e-6 <= temperature < float("inf")):   # 1 / temperature is an fp32 argument
        raise ValueError(f"temperature must be >= 0: 0 (greedy) or a finite number >= 1e-6, got {temperature}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0, got {top_k!r}")
    validate.number(top_p, "top_p")
    if not 2.0**-126 <= top_p <= 1.0:     # a smaller top_p reaches the kernels as 0 (fp32), which keeps no token
        raise ValueError(f"top_p must be in [2**-126, 1], got {top_p}")
    if temperature == 0:
        return argmax(logits, out, num_blocks, flag)
    flat, rows, vocab = _rows(logits)
    if rows * vocab >= 2**31:
        raise ValueError(f"{rows} rows x {vocab} logits: the noise offsets must fit int32")
    device = validate.same_device(logits=logits)
    seed = _seed_tensor(seed, device)
    out = validate.output(out, "out", tuple(logits.shape[:-1]), torch.int64, device)
    flag = _flag(flag, out, logits)
    validate.disjoint({"out": out}, {"seed": seed})
    inv_temp = 1.0 / temperature
    bounds = torch.empty(rows, 2, dtype=torch.int64, device=device)      # [lo, hi] key interval per row
    bounds[:, 0].fill_(INT32_MIN)
    if 0 < top_k < vocab:
        bounds[:, 1].fill_(INT32_MAX)
        search_threshold(flat, bounds, inv_temp, top_k=top_k)
    if top_p < 1.0:
        bounds[:, 1].fill_(INT32_MAX)
        search_threshold(flat, bounds, inv_temp, top_p=top_p)
    tile, chunk, n_blocks = _split(vocab, num_blocks)
    _reduce(flat, out.view(rows), tile, chunk, n_blocks, bounds=bounds, seed=seed, inv_temp=inv_temp,
            flag=None if flag is None else flag.view(rows))
    return out


def gumbel_noise(seed, rows: int, vocab: int, device="cpu") -> torch.Tensor:
    """[rows, vocab] fp32: exactly the noise `sample(..., seed=seed)` adds (for checks and figures)."""
    device = torch.device(device)
    seed = _seed_tensor(seed, device)
    n = rows * vocab
    out = torch.empty(rows, vocab, dtype=torch.float32, device=device)
    gumbel_noise_kernel[(triton.cdiv(n, 1024),)](seed, out, n, BLOCK=1024)
    return out
