"""Run the engine once at full size and say which op fails, if one does (a debugging aid for the GPU).

    TRITONLLM_SYNC_OPS=1 python scripts/engine_smoke.py [--level operators|fused|fast] [--prompt N] [--steps N]

With TRITONLLM_SYNC_OPS=1 the engine waits for every kernel, so a fault (an illegal address) is reported
at the op that made it, with the shapes and strides it was called with. Random weights of the real
shapes in the runtime's dtype; no CUDA graph unless --graph. Under compute-sanitizer, use --prompt 3.
"""
import argparse
import time

import torch

import tritonllm_course
from tritonllm_course.config import PRESETS


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", default="operators")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS))
    p.add_argument("--prompt", type=int, default=16, help="prompt length")
    p.add_argument("--steps", type=int, default=3, help="decode steps")
    p.add_argument("--graph", action="store_true", help="decode from a CUDA graph")
    args = p.parse_args()
    if args.prompt < 1 or args.steps < 0:
        p.error(f"--prompt must be >= 1 and --steps >= 0, got {args.prompt} and {args.steps}")
    rt = tritonllm_course.setup()
    # imported after setup, which on a CPU switches the interpreter on before triton's import: imported above,
    # it made every run there a RuntimeError traceback
    from tritonllm_course.engine import Engine
    config = PRESETS[args.preset or rt.preset]
    dtype = rt.dtype if rt.on_gpu else torch.float32
    t0 = time.perf_counter()
    try:   # the engine's own checks (a level it does not have, a prompt past the positions): one line each
        engine = Engine.random(config, dtype, rt.device, seed=0, max_seq_len=args.prompt + args.steps + 8,
                               level=args.level, cuda_graph=args.graph)
    except ValueError as e:
        p.error(str(e))
    ids = [(7 * i + 3) % config.vocab_size for i in range(args.prompt)]
    engine.prefill(ids)
    tokens = [int(engine.counters.ids.reshape(-1)[0])]
    for _ in range(args.steps):
        engine.decode()
        tokens.append(int(engine.counters.ids.reshape(-1)[0]))
    if rt.on_gpu:
        torch.cuda.synchronize()
    print(f"{args.level}: prompt {args.prompt}, {args.steps} steps ok in {time.perf_counter() - t0:.1f} s: "
          f"tokens {tokens}")


if __name__ == "__main__":
    main()
