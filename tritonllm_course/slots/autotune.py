"""Slot specs of chapter 26_autotune's autotuned projections: variants of the decode GEMV and prefill GEMM slots.

Same inputs, output, reference and byte count as the projections of chapter 05_projections (slots/linear.py); only the
kernel differs: its tiles are tuned on first use for each (N, K, dtype), and for the GEMM each bucket of
prompt lengths. The real shapes are the merged attention and DeltaNet input projections (5120 and 8224 x
1024), the MLP down projection (1024 x 3584) and, for the GEMM, a prompt of 128 tokens and one of 100 (the
same bucket). The tiny ones are odd sizes (masks on every edge), and for the GEMV a K narrower than every
config's BLOCK_K (pruning must still leave a config to run).
"""
from ..reference.linear import linear
from . import implement
from .common import projection_bytes, projection_flops, projection_inputs, projection_out
from .linear import PROMPT


def _shape(M, N, K):
    return {"M": M, "N": N, "K": K}


_COMMON = dict(family="autotune", reference=linear, make_inputs=projection_inputs, make_out=projection_out,
               bytes=projection_bytes, flops=projection_flops, chapter="26_autotune", dims={"out": ("token", "row")})

implement("in_proj.autotuned", function="autotuned_gemv", op=2, title="QKV projection (decode, autotuned)",
          qwen="the merged attention / DeltaNet input projections of one token, tiles tuned per shape",
          shapes={"tiny": [_shape(1, 40, 24), _shape(1, 509, 131), _shape(1, 392, 128)],
                  "real": [_shape(1, 5120, 1024), _shape(1, 8224, 1024)]},
          **_COMMON)
implement("down.autotuned", function="autotuned_gemv", op=12,
          title="MLP down projection (decode, autotuned)", qwen="3584 -> 1024 for one token, tiles tuned",
          shapes={"tiny": [_shape(1, 40, 24), _shape(1, 131, 509)], "real": [_shape(1, 1024, 3584)]},
          **_COMMON)
implement("in_proj.prefill_autotuned", function="autotuned_gemm", op=2,
          title="QKV projection (prefill, autotuned)",
          qwen="the merged input projections over a prompt, tiles tuned per bucket of prompt lengths",
          shapes={"tiny": [_shape(37, 509, 131), _shape(16, 392, 128)],
                  "real": [_shape(PROMPT, 5120, 1024), _shape(100, 8224, 1024)]},
          **_COMMON)
