"""Small helpers shared by the kernel tests."""
import torch

from tritonllm_course.checking import compare
from tritonllm_course.runtime import runtime


def randn(*shape, dtype=torch.float32, scale=1.0, seed=0) -> torch.Tensor:
    """Seeded normal values on the runtime's device, drawn in fp32 then cast (same values in every dtype)."""
    gen = torch.Generator(device=runtime().device).manual_seed(seed)
    return (scale * torch.randn(*shape, device=runtime().device, generator=gen)).to(dtype)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in fp64 (inf for NaN or a shape mismatch), as the checks compute it."""
    return compare(a, b, "value")[0]


def filled(exercise: str, solution: str) -> str:
    """The exercise with every region's body taken from its solution: a learner who wrote the solution."""
    from tritonllm_course import regions
    lines, out, pos = exercise.splitlines(), [], 0
    for mine, theirs in zip(regions.regions(exercise), regions.regions(solution), strict=True):
        out += lines[pos:mine.begin + 1] + theirs.body
        pos = mine.end
    return "\n".join(out + lines[pos:]) + "\n"
