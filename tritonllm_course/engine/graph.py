"""Capture a step of static buffers into a CUDA graph once, then replay it (chapter 18_cuda_graphs).

A decode step of Qwen3.5 is a few hundred kernel launches of a few microseconds each. Launched one by
one from Python, the GPU waits on the CPU between them. A CUDA graph records the launches once (kernels,
arguments, addresses) and replays the whole sequence with one call. What that requires, and what the
engine does for it:
1. static buffers: every tensor at a fixed address (`buffers.py`); values that change per token are
   read from device memory (`Counters`), never passed as Python numbers;
2. warm-up before capture: the first call of a Triton kernel compiles it (and an autotuner would time
   its configurations, syncing): neither may happen during capture. The warm-up runs the real step, so
   it changes the state; `preserved` puts the state back afterwards;
3. no host sync during capture (`.item()`, `int(t)`, printing a tensor): the kernels' host-side range
   checks skip themselves while the stream is capturing;
4. no Python control flow on changing values: it is frozen at capture. The engine captures one graph
   per sampling configuration, and decides on end-of-sequence outside the graph.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch


@contextlib.contextmanager
def preserved(tensors: list[torch.Tensor]):
    """Undo whatever the block writes into `tensors` (in place, so their addresses stay)."""
    saved = [t.clone() for t in tensors]
    try:
        yield
    finally:
        for t, s in zip(tensors, saved):
            t.copy_(s)


def warm_up(fn: Callable[[], None], runs: int = 2) -> None:
    """Run `fn` on a side stream, as torch.cuda.graph's documentation asks before a capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(runs):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()


def capture(graph: torch.cuda.CUDAGraph, fn: Callable[[], None], pool=None) -> None:
    """Record `fn()` into `graph`; a capture that fails leaves PyTorch's random numbers usable.

    When a capture fails (an op that syncs, such as `.item()`, or a kernel that raises), PyTorch's
    `capture_end` raises before it takes the default CUDA generator out of capture mode, and every later
    random op outside a capture then fails ("Offset increment outside graph capture encountered
    unexpectedly"). A capture that succeeds takes it out, so one of a single op follows the failed one
    before the error goes on to the caller."""
    try:
        with torch.cuda.graph(graph, pool=pool):
            fn()
    except BaseException:
        scratch = torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            scratch.add_(1)
        raise


class GraphedStep:
    """`fn` (no arguments, static buffers only) captured into a CUDA graph; calling it replays the graph.

    state: the tensors `fn` updates (caches, counters); the warm-up runs are undone on them.
    pool:  the memory pool its capture allocates from (`torch.cuda.graph_pool_handle()`, or another graph's
           `.pool()`); None, as the engine passes: a private one, so that graphs replay in any order
           (chapter 18_cuda_graphs, what a capture allocates).
    """

    def __init__(self, fn: Callable[[], None], state: list[torch.Tensor], warmup: int = 2, pool=None):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA graphs need a CUDA GPU")
        with preserved(state):
            warm_up(fn, warmup)
            self.graph = torch.cuda.CUDAGraph()
            capture(self.graph, fn, pool)
        torch.cuda.synchronize()

    def __call__(self) -> None:
        self.graph.replay()


def layer_pieces(n: int, split: bool = True) -> list[range]:
    """Layers 0..n-1 in pieces of 1, 2, 4, ... layers (the last cut short), each a CUDA graph of its own; with
    `split` False, one piece of all n.

    Under the profiler, cudaGraphLaunch of one graph of a whole 128-token chunk kept an H100 idle from
    264 us<!-- fig:lab.prefill_graph_trace_h100.launch_host.min_us --> to
    300 us<!-- fig:lab.prefill_graph_trace_h100.launch_host.max_us --> before its first kernel
    (lab/results/prefill_graph_probe_nvidia-h100-80gb-hbm3_2026-12-06_trace.json); in doubling pieces the first
    starts after a few kernels' launch. Timed unprofiled, the pieces gave the first
    token no sooner (lab/prefill_graph_probe.py, H100): the profiler's launch time is mostly its own, so the
    engine keeps one graph (`Engine.PREFILL_PIECES` False) and the pieces stay an option."""
    if not split:
        return [range(n)]
    pieces, lo, size = [], 0, 1
    while lo < n:
        pieces.append(range(lo, min(n, lo + size)))
        lo, size = lo + size, 2 * size
    return pieces


def graphed_pieces(step: Callable[[range], Callable[[], None]], pieces: list[range], state: list[torch.Tensor],
                   warmup: int = 1) -> list[GraphedStep]:
    """`step(piece)` captured for each piece in order, all from the first one's memory pool: they replay in the
    order they were captured, never side by side, so they may share it (torch.cuda.graph's rule for a shared
    pool), and the pieces together hold no more memory than one graph of the whole."""
    graphs: list[GraphedStep] = []
    for piece in pieces:
        graphs.append(GraphedStep(step(piece), state, warmup, pool=graphs[0].graph.pool() if graphs else None))
    return graphs

