"""Test session set-up: solutions selected, runtime chosen before triton is imported, `gpu` marker."""
import os

os.environ.setdefault("TRITONLLM_KERNELS", "solutions")

import pytest  # noqa: E402

import tritonllm_course  # noqa: E402

RT = tritonllm_course.setup()


def pytest_collection_modifyitems(config, items):
    if RT.on_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _memcheck():
    """Under the interpreter every kernel's loads and stores are bounds-checked against its tensor
    arguments (`tritonllm_course.memcheck`): what would be an illegal address on a GPU fails here.
    TRITONLLM_MEMCHECK=0 turns it off."""
    if RT.on_gpu or os.environ.get("TRITONLLM_MEMCHECK", "1") == "0":
        yield
        return
    from tritonllm_course import memcheck
    with memcheck.checked():
        yield


@pytest.fixture(scope="session")
def rt():
    return RT


@pytest.fixture
def course_copy(tmp_path, monkeypatch):
    """An empty course root (exercises/ and solutions/ dirs) that the kernel loader reads instead."""
    (tmp_path / "exercises").mkdir()
    (tmp_path / "solutions").mkdir()
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(tmp_path))
    return tmp_path
