"""Does PDL shorten the decode step's GEMV chain when every weight load is issued before the wait?

    python -m lab.pdl_chain_probe [OUTDIR]   (on an sm_90 GPU; writes OUTDIR/pdl_chain_probe_<gpu>_<date>.json
                                              and the SASS of the recipe's GEMV beside it)

Question: `pdl_probe` found no gain from programmatic dependent launch on a chain of looped GEMVs that loaded
one weight tile before `gdc_wait` and the rest after it. A published Llama-1B decode under a CUDA graph with
PDL (msaroufim/megakernels-vs-cuda-graphs, llama/kernels/projection.cu) triggers the dependents at entry and
issues *all* of a kernel's weight loads before the wait. Does that recipe pay in Triton, and does the
compiler keep the loads where the source puts them?
Method: the decode step's 97 GEMV shapes of Qwen3.5-0.8B (24 layers of in-projection 6144 x 1024,
out-projection 1024 x 2048, gate/up 7168 x 1024, down 1024 x 3584, then the LM head 248320 x 1024; 1.44 GB
of bf16 weights), each reading the previous one's output, replayed from one CUDA graph. Each program holds
its whole [ROWS, K] weight tile (K padded to a power of two, masked) in registers, loaded in one shot.
MODE 0 no PDL; 1 the recipe: dependents triggered at entry, the weights loaded, `pdl_wait`, then x;
2 triggered at entry, the wait first; 3 the weights before the wait, no early trigger. For several
(ROWS, num_warps), modes 0 and 1 (2 and 3 at the recipe's 4 rows); the time per kernel against the same
bytes at the copy ceiling (`measure.benchmark.ceiling_gbps`, a device-to-device copy, in the same run). Then the SASS
(`cuobjdump -sass`) of the mode-1 kernel at K = 1024 and 3584: where each global load sits relative to
the dependency wait, and the PTX's order for comparison. Then what goes wrong: a kernel that reads its
input before the wait, after a slow producer, reads stale data (the number of stale outputs in 20 tries).
Last, the real kernels: the engine's fast decode step of Qwen3.5-0.8B (random weights, 128 cached tokens,
its CUDA graph) without PDL and with it at several (rows, weights per thread) of the whole-tile GEMVs.
Result: NVIDIA H200, 2026-12-02 (lab/results/pdl_chain_probe_nvidia-h200_2026-12-02.json; the SASS in
lab/results/pdl_chain_probe_nvidia-h200_2026-12-02_sass_K{1024,3584}.txt). Copy ceiling 4,238 GB/s, so the
chain's 1.44 GB take at least 340 us. Without PDL the best tile is 2 rows on 4 warps, 528 us (64% of the
ceiling); a whole tile of 4 or more rows is slower without PDL (617-775 us). With the recipe (mode 1):
4 rows on 2 warps 428 us (79%), 4 on 4 warps 432 us (79%), 8 on 4 456 us, 16 on 8 480 us, 2 on 4 501 us.
At 4 rows on 4 warps: the wait first (mode 2) 596 us, the weights before the wait without the early
trigger (mode 3) 472 us. Every mode's output is bit-identical to mode 0's. SASS: the trigger is `PREEXIT`,
the wait `ACQBULK`; at K = 1024 all 4 of a thread's weight loads (`LDG.E.EF.128`) sit before `ACQBULK` and
the x load after it, at K = 3584 all 16 before and the 4 x loads after (the PTX's order is the same): the
compiler keeps them where the source puts them. Read before the wait, 19,456 of 20,480 outputs were
stale; after it, none. The engine's decode step at 128 cached tokens: 690 us a token without PDL, 663 us
with it at 4 rows and 32 weights a thread (16: 699; 64: 677; 2 rows: 671; 8 rows: 695), its tokens
identical to the same kernels launched without the overlap.
Verdict: adopted: every kernel of the engine's decode step but the LM head's GEMV takes PDL (`Engine(pdl=...)`,
tritonllm_course/engine/engine.py; on by default on sm_90+; the LM head runs without it, `pdl_variants_probe`,
solutions/linear.py's PDL_MAX_PROGRAMS), the decode GEMVs of solutions/norm_fusion.py
and solutions/layer_fusion.py hold their whole tile at 4 rows and 32 weights a thread
(`triton_helpers.pdl_gemv_config`), the recurrence loads its state before the wait. On the chain PDL
gains 19%; in the engine 9% at 128 cached tokens and 13% at 4,096 (0.711 -> 0.647 and 0.759 -> 0.663 ms a
token, results/engine_nvidia-h200_2026-12-02_pdl/):
the kernels that wait at their top (the attention, the sampling) and the LM head keep their gaps.
"""
import subprocess
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course.engine.graph import capture
from tritonllm_course.triton_helpers import pdl_launch_dependents, pdl_wait

LAYERS = 24
SHAPES = [(6144, 1024), (1024, 2048), (7168, 1024), (1024, 3584)] * LAYERS + [(248320, 1024)]
CONFIGS = [(2, 4), (4, 2), (4, 4), (8, 4), (16, 8)]     # (ROWS, num_warps)
RECIPE = (4, 4)
ENGINE_TILES = [(4, 32), (4, 16), (2, 32), (8, 32), (4, 64)]   # (rows, weights per thread) of the PDL GEMVs


@triton.jit
def whole_tile_gemv(x_ptr, w_ptr, y_ptr, N, K, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, MODE: tl.constexpr):
    # y[rows] = W[rows, :] @ x with the whole [ROWS, K] tile of W in registers (BLOCK_K >= K)
    if MODE == 1 or MODE == 2:
        pdl_launch_dependents()
    if MODE == 2:
        pdl_wait()
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_K)
    ok = (rows < N)[:, None] & (cols < K)[None, :]
    w = tl.load(w_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first")
    if MODE == 1 or MODE == 3:
        pdl_wait()
    x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    y = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=rows < N)


@triton.jit
def slow_producer(y_ptr, value, SPIN: tl.constexpr):
    # triggers its dependents at once, then spends a while before storing `value` into y[0:1024]
    pdl_launch_dependents()
    acc = tl.zeros((1024,), tl.float32) + value
    for _ in range(SPIN):
        acc = acc * 1.0000001 + 1e-30
    offs = tl.arange(0, 1024)
    tl.store(y_ptr + offs, (acc - acc + value).to(y_ptr.dtype.element_ty))


@triton.jit
def consumer(y_ptr, out_ptr, READ_FIRST: tl.constexpr):
    # copies y into out: READ_FIRST reads y before the wait (wrong), else after it
    offs = tl.arange(0, 1024)
    if READ_FIRST:
        v = tl.load(y_ptr + offs)
        pdl_wait()
    else:
        pdl_wait()
        v = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, v)


def launch(x, w, y, rows, warps, mode):
    n, k = w.shape
    return whole_tile_gemv[(triton.cdiv(n, rows),)](x, w, y, n, k, ROWS=rows, BLOCK_K=triton.next_power_of_2(k),
                                                    MODE=mode, num_warps=warps, launch_pdl=mode != 0)


def graph_us(fn, replays=50, runs=5) -> float:
    """us per fn() replayed from a CUDA graph: the median of `runs` timings of `replays` replays."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    capture(graph, fn)
    for _ in range(5):
        graph.replay()
    times = sorted(common.events_us(graph.replay, replays) for _ in range(runs))
    return times[runs // 2]


def sass_of(compiled) -> list[str]:
    """The SASS instructions of a compiled Triton kernel (cuobjdump -sass of its cubin), one per line."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(compiled.asm["cubin"])
        text = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    body = [line.split("*/", 1)[1].split(";")[0].strip() for line in text.splitlines()
            if line.strip().startswith("/*") and "*/" in line]
    return [i for i in body if i[:1].isalpha() or i.startswith("@")]      # "@P0 LDG...": a masked load


def opcode(instruction: str) -> str:
    op = instruction.split()[0]
    return instruction.split()[1] if op.startswith("@") and len(instruction.split()) > 1 else op


def load_placement(with_pdl: list[str], plain: list[str]) -> dict:
    """Where each global load of the PDL kernel sits relative to the instructions PDL added (those whose
    opcode the plain kernel lacks: the trigger, then the wait)."""
    plain_ops = {opcode(i) for i in plain}
    added = [(n, i) for n, i in enumerate(with_pdl) if opcode(i) not in plain_ops]
    loads = [n for n, i in enumerate(with_pdl) if opcode(i).startswith("LDG")]
    wait_at = added[-1][0] if added else None
    return {"added_instructions": [f"{n}: {i}" for n, i in added],
            "loads_before_last_added": sum(n < wait_at for n in loads) if added else None,
            "loads_after_last_added": sum(n > wait_at for n in loads) if added else None,
            "load_lines": [f"{n}: {with_pdl[n]}" for n in loads]}


def ptx_placement(ptx: str) -> dict:
    """The same in the PTX: global loads before and after griddepcontrol.wait."""
    lines = [line.strip().split(" ", 1)[-1] if line.strip().startswith("@") else line.strip()   # "@%p1 ld..."
             for line in ptx.splitlines()]
    wait = next((n for n, line in enumerate(lines) if line.startswith("griddepcontrol.wait")), None)
    loads = [n for n, line in enumerate(lines) if line.startswith("ld.global")]
    return {"wait_line": wait, "loads_before": sum(n < wait for n in loads) if wait is not None else None,
            "loads_after": sum(n > wait for n in loads) if wait is not None else None}


def stale_reads(read_first: bool, tries: int = 20) -> int:
    """Outputs of `consumer` that do not hold what `slow_producer` stored, over `tries` launches."""
    y = torch.zeros(1024, device="cuda", dtype=torch.float32)
    out = torch.empty_like(y)
    stale = 0
    for t in range(tries):
        slow_producer[(1,)](y, float(t + 1), SPIN=20000, num_warps=4)
        consumer[(1,)](y, out, READ_FIRST=read_first, num_warps=4, launch_pdl=True)
        torch.cuda.synchronize()
        stale += int((out != t + 1).sum())
    return stale


def engine_decode_us(pdl: bool, tile: tuple[int, int], context: int = 128, tokens: int = 64) -> dict:
    """The fast level's decode step of Qwen3.5-0.8B (random weights of the real shapes, bf16) replayed from
    its CUDA graph, with or without PDL, the PDL GEMVs' (rows, weights per thread) = tile: us per token
    after a prompt of `context` tokens, and its greedy tokens."""
    from tritonllm_course import triton_helpers
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    from tritonllm_course.runtime import no_launch_overlap
    triton_helpers.PDL_ROWS, triton_helpers.PDL_ELEMENTS = tile
    engine = Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=0, level="fast", pdl=pdl,
                           max_seq_len=context + 3 * tokens + 8)
    prompt = torch.randint(0, QWEN35_0_8B.vocab_size, (context,), generator=torch.Generator().manual_seed(0))
    ids = engine.generate(prompt.tolist(), 16)             # compiles and captures; the tokens to compare
    with no_launch_overlap():                              # the same kernels, each after the one before
        same = engine.generate(prompt.tolist(), 16) == ids
    engine.reset()
    engine.prefill(prompt.tolist())
    for _ in range(8):
        engine.decode()
    us = common.events_us(engine.decode, tokens)
    del engine
    torch.cuda.empty_cache()
    return {"us_per_token": us, "tokens": ids, "tokens_equal_without_overlap": same}


def check() -> float:
    """The GEMV's worst relative error in every mode, NaN-poisoned outputs, odd shapes: runs anywhere (under
    the interpreter the PDL calls are no-ops and `launch_pdl` is ignored)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device="cpu").manual_seed(0)
    worst = 0.0
    for n, k in [(37, 129), (64, 1000)]:
        w = torch.randn(n, k, generator=gen).to(device)
        x = torch.randn(k, generator=gen).to(device)
        for mode in range(4):
            y = torch.full((n,), float("nan"), device=device)
            launch(x, w, y, 4, 4, mode)
            worst = max(worst, common.rel_err(y.cpu(), (w.double() @ x.double()).cpu()))
    return worst


def main(out):
    torch.manual_seed(0)
    ws = [0.03 * torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for n, k in SHAPES]
    ys = [torch.zeros(max(n, 3584), device="cuda", dtype=torch.bfloat16) for n, _ in SHAPES]
    x0 = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    nbytes = sum(w.numel() * 2 for w in ws)
    from tritonllm_course.measure.benchmark import ceiling_gbps
    ceiling = ceiling_gbps()
    floor_us = nbytes / ceiling / 1e3
    res = common.header(bytes=nbytes, kernels=len(SHAPES), copy_ceiling_GBps=ceiling, floor_us=floor_us,
                        chain={}, sass={}, stale={})
    path = common.result_path(out, "pdl_chain_probe")

    def chain(rows, warps, mode):
        x = x0
        for w, y in zip(ws, ys):
            launch(x, w, y, rows, warps, mode)
            x = y

    for rows, warps in CONFIGS:
        reference = None        # the config's mode 0: PDL must not change a bit
        for mode in ((0, 1, 2, 3) if (rows, warps) == RECIPE else (0, 1)):
            key = f"rows{rows}_warps{warps}_mode{mode}"
            try:
                us = graph_us(lambda: chain(rows, warps, mode))
                last = ys[-1][:SHAPES[-1][0]].clone()
                reference = last if reference is None else reference
                res["chain"][key] = {"us": us, "us_per_kernel": us / len(SHAPES), "of_ceiling": floor_us / us,
                                     "equals_mode0": torch.equal(last, reference)}
            except Exception as e:          # a config that does not compile is recorded
                res["chain"][key] = {"error": common.error_text(e)}
            print(key, res["chain"][key], flush=True)
            common.save(path, res)
    # the recipe's SASS: where the loads sit relative to the wait
    for k in (1024, 3584):
        w = torch.randn(1024, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(1024, device="cuda", dtype=torch.bfloat16)
        plain, recipe = (launch(x, w, y, *RECIPE, mode) for mode in (0, 1))
        sass = sass_of(recipe)
        res["sass"][f"K{k}"] = {"sass": load_placement(sass, sass_of(plain)), "ptx": ptx_placement(recipe.asm["ptx"])}
        Path(path.with_name(path.stem + f"_sass_K{k}.txt")).write_text("\n".join(sass) + "\n")
        print(k, {key: v for key, v in res["sass"][f"K{k}"]["sass"].items() if key != "load_lines"},
              res["sass"][f"K{k}"]["ptx"], flush=True)
    res["stale"] = {"read_before_wait": stale_reads(True), "read_after_wait": stale_reads(False),
                    "outputs": 20 * 1024}
    print("stale", res["stale"], flush=True)
    common.save(path, res)
    # the real kernels: the engine's fast decode step without PDL, then with it at several GEMV tiles
    del ws, ys
    torch.cuda.empty_cache()
    res["engine"] = {}
    for pdl, tile in [(False, ENGINE_TILES[0]), *((True, t) for t in ENGINE_TILES), (False, ENGINE_TILES[0])]:
        key = f"{'pdl' if pdl else 'no_pdl'}_rows{tile[0]}_elements{tile[1]}"
        key += "_again" if key in res["engine"] else ""
        try:
            res["engine"][key] = engine_decode_us(pdl, tile)
        except Exception as e:
            res["engine"][key] = {"error": common.error_text(e)}
        print(key, {k: v for k, v in res["engine"][key].items() if k != "tokens"}, flush=True)
        common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
