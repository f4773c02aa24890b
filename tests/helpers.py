"""Small helpers shared by the kernel tests."""
import json
import os
import time
from pathlib import Path

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


def record_measured(name: str, values: dict) -> Path | None:
    """Keep a test's measured numbers where a GPU run asks for them: with TRITONLLM_MEASURED=DIR (scripts/gpu_check.sh
    sets it inside its results) DIR/<name>.json gets them with the device, the date, the versions and the test's
    id, written atomically; without it nothing is written (the test prints its numbers as before). A record is
    what docs and chapters cite; a number printed under `-s` is not."""
    folder = os.environ.get("TRITONLLM_MEASURED")
    if not folder:
        return None
    import triton
    from tritonllm_course.safe_files import atomic_write_text
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    data = {"gpu": device, "date": time.strftime("%Y-%m-%d"),
            "versions": f"torch {torch.__version__}, triton {triton.__version__}",
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], **values}
    Path(folder).mkdir(parents=True, exist_ok=True)
    return atomic_write_text(Path(folder) / f"{name}.json", json.dumps(data, indent=1) + "\n", root=folder)
