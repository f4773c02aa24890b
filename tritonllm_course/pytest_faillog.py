"""pytest plugin for long GPU runs: each failure's report is appended to $TRITONLLM_FAILLOG the moment it
happens, so a run stopped at its time limit still tells what failed and why (pytest's own summary comes
only at the end); with $TRITONLLM_DURATIONS set, every test's outcome and seconds (set-up, call and
tear-down together) are appended there as a tab-separated line when it ends, the data that
scripts/gpu_parts.py splits the GPU suite by. Used by scripts/gpu_check.sh as `-p tritonllm_course.pytest_faillog`."""
import os
from pathlib import Path

import pytest

_controller = False   # under pytest-xdist the controller sees every worker's reports again: workers write
_spent: dict[str, float] = {}
_outcome: dict[str, str] = {}


def pytest_configure(config):
    global _controller
    for name in ("TRITONLLM_FAILLOG", "TRITONLLM_DURATIONS"):   # refused at the start, not at the first test's end
        _check_log(name)
    _controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _check_log(name: str) -> None:
    """A pytest.UsageError (one line, no INTERNALERROR) when the file that the variable `name` names cannot be
    appended to, by the course's own rule for a file a tool writes (`safe_files.check_writable`: no symbolic
    link, no folder, fifo or device, nothing read-only), and its folder must already be there."""
    from .safe_files import UnsafeWrite, check_writable
    value = os.environ.get(name)
    if not value:
        return
    try:
        check_writable(value, Path(value).parent)
    except UnsafeWrite as e:
        raise pytest.UsageError(f"{name}: {e}") from None


def _append(path: str, text: str) -> None:
    with open(path, "a") as f:      # one write a line: workers append to the same file
        f.write(text)


def pytest_runtest_logreport(report):
    if _controller:
        return
    failed = report.failed or (report.when == "call" and report.outcome == "failed")
    path = os.environ.get("TRITONLLM_FAILLOG")
    if path and failed:
        _append(path, f"\n=== FAILED {report.nodeid} ({report.when}, {report.duration:.1f} s)\n"
                + str(report.longrepr)[-6000:] + "\n")
    path = os.environ.get("TRITONLLM_DURATIONS")
    if not path:
        return
    node = report.nodeid
    _spent[node] = _spent.get(node, 0.0) + report.duration
    outcome = "failed" if failed else ("skipped" if report.skipped else "passed")
    if report.when == "call" or not report.passed:      # the call's outcome, or a set-up's skip or error
        _outcome[node] = _outcome.get(node) if _outcome.get(node) == "failed" else outcome
    if report.when == "teardown":
        _append(path, f"{node}\t{_outcome.pop(node, outcome)}\t{_spent.pop(node):.2f}\n")
