"""How the chapters' kernels start under nbval (notebooks/conftest.py): a kernel that dies before it answers is
started again, KERNEL_START_TRIES times in all, then the error stands; a kernel that starts is started once."""
import importlib.util
from pathlib import Path

import nbval.kernel
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def chapters_conftest(monkeypatch):
    spec = importlib.util.spec_from_file_location("chapters_conftest", ROOT / "notebooks" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(nbval.kernel, "start_new_kernel", nbval.kernel.start_new_kernel)   # undone after
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)
    return module


def _starts(monkeypatch, module, failures: int) -> list:
    calls = []

    def start(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) <= failures:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "km", "kc"
    monkeypatch.setattr(module, "_start_new_kernel", start)
    return calls


def test_nbval_starts_its_kernels_through_the_retry(chapters_conftest):
    assert nbval.kernel.start_new_kernel is chapters_conftest._start_kernel_again_if_it_died


@pytest.mark.parametrize("failures", [0, 1, 2])
def test_a_kernel_that_died_is_started_again(monkeypatch, chapters_conftest, failures):
    calls = _starts(monkeypatch, chapters_conftest, failures)
    assert nbval.kernel.start_new_kernel(kernel_name="python3") == ("km", "kc")
    assert len(calls) == failures + 1 and all(c == {"kernel_name": "python3"} for c in calls)


def test_the_error_stands_after_the_last_try(monkeypatch, chapters_conftest):
    calls = _starts(monkeypatch, chapters_conftest, chapters_conftest.KERNEL_START_TRIES)
    with pytest.raises(RuntimeError, match="Kernel died"):
        nbval.kernel.start_new_kernel()
    assert len(calls) == chapters_conftest.KERNEL_START_TRIES
