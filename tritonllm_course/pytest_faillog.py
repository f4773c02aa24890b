"""pytest plugin for long GPU runs: each failure's report is appended to $TRITONLLM_FAILLOG the moment it
happens, so a run stopped at its time limit still tells what failed and why (pytest's own summary comes
only at the end). Used by scripts/gpu_check.sh as `-p tritonllm_course.pytest_faillog`."""
import os

_controller = False   # under pytest-xdist the controller sees every worker's reports again: workers write


def pytest_configure(config):
    global _controller
    _controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_runtest_logreport(report):
    path = os.environ.get("TRITONLLM_FAILLOG")
    if _controller or not path or not (report.failed or (report.when == "call" and report.outcome == "failed")):
        return
    with open(path, "a") as f:
        f.write(f"\n=== FAILED {report.nodeid} ({report.when}, {report.duration:.1f} s)\n")
        f.write(str(report.longrepr)[-6000:] + "\n")
