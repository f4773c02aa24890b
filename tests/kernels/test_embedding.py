"""The embedding kernel beyond the generic slot check: id checks, out-of-range safety, both id dtypes,
decode rows equal prefill rows, and (GPU) replay from a CUDA graph."""
import pytest
import torch

from tritonllm_course import kernels
from tritonllm_course.runtime import runtime

RT = runtime()
embedding = kernels.get("embedding", "embedding", "solutions")


def table(vocab=50, hidden=70, dtype=torch.float32):
    gen = torch.Generator(device=RT.device).manual_seed(0)
    return torch.randn(vocab, hidden, dtype=dtype, device=RT.device, generator=gen)


def ids(*values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=RT.device)


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
def test_rows_are_copied_bit_exactly(ids_dtype):
    w = table(dtype=torch.float16)
    i = ids(0, 49, 3, 3, 17, dtype=ids_dtype)
    assert torch.equal(embedding(i, w), w[i.long()])


def test_decode_rows_equal_prefill_rows():
    w, i = table(), ids(5, 9, 0, 44)
    batch = embedding(i, w)
    for t in range(i.numel()):
        assert torch.equal(embedding(i[t:t + 1], w), batch[t:t + 1])


@pytest.mark.parametrize("bad", [50, -1])
def test_out_of_range_id_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=rf"token id {bad} is outside \[0, 49\]: outside the vocabulary"):
        embedding(ids(1, bad, 2), table())


def test_unchecked_bad_id_gives_a_nan_row_and_nothing_else():
    w = table()
    out = embedding(ids(1, 50, 2, -7), w, check_ids=False)
    assert torch.isnan(out[1]).all() and torch.isnan(out[3]).all()
    assert torch.equal(out[0], w[1]) and torch.equal(out[2], w[2])


def test_bad_arguments_are_named():
    w = table()
    with pytest.raises(TypeError, match="ids has dtype float32"):
        embedding(torch.zeros(3, device=RT.device), w)
    with pytest.raises(ValueError, match="ids must be 1-D"):
        embedding(ids(1, 2).reshape(1, 2), w)
    with pytest.raises(ValueError, match="weight must be contiguous"):
        embedding(ids(1), table(70, 50).t())
    with pytest.raises(TypeError, match="out has dtype float16"):
        embedding(ids(1), w, out=torch.empty(1, 70, dtype=torch.float16, device=RT.device))


def test_empty_ids_give_an_empty_output():
    assert embedding(ids(dtype=torch.int64)[:0], table()).shape == (0, 70)


@pytest.mark.gpu
def test_cuda_graph_replay_reads_new_ids_from_device_memory():
    """The engine's decode step: ids live in a static buffer, the range check is skipped during capture."""
    w = table(248320, 1024, torch.bfloat16)
    static_ids, out = ids(7), torch.empty(1, 1024, dtype=torch.bfloat16, device="cuda")
    embedding(static_ids, w, out=out)           # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        embedding(static_ids, w, out=out)
    for token in (0, 123456, 248319):
        static_ids.fill_(token)
        graph.replay()
        assert torch.equal(out[0], w[token])
