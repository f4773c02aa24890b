"""TritonLLM course: the shared helpers of the notebooks, tests and engine.

Call `tritonllm_course.setup()` first: it chooses GPU or Triton-interpreter mode before `triton` is
imported anywhere.
"""
from .runtime import Runtime, course_folder, runtime, setup

__version__ = "0.1.0"

course_folder()   # installed without the course (a plain `pip install .`): find it from the current folder


def check(*args, **kwargs):
    """See `tritonllm_course.checking.check`."""
    from .checking import check as _check
    return _check(*args, **kwargs)


def bench(*args, **kwargs):
    """See `tritonllm_course.measure.benchmark.bench`."""
    from .measure.benchmark import bench as _bench
    return _bench(*args, **kwargs)


__all__ = ["Runtime", "bench", "check", "runtime", "setup", "__version__"]
