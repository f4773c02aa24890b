"""Bad arguments to the Python API, each refused before any work with a TypeError / ValueError that names it:
the kernels' host wrappers (block sizes, meta tensors, empty dims, outputs over inputs, the cache's length), the
swap check, the engine's constructor and its generation arguments. Each was taken before: a silent wrong answer,
a vacuous pass, or a traceback from deep inside."""
import pytest
import torch

from tritonllm_course import kernels, swap, validate
from tritonllm_course.config import TINY
from tritonllm_course.engine import Engine
from tritonllm_course.generation import generate
from tritonllm_course.model import Qwen35Model
from tritonllm_course.runtime import setup
from tritonllm_course.weights import random_weights

DEV = setup(quiet=True).device          # the kernels take the runtime's tensors: CUDA on a GPU


@pytest.fixture(scope="module")
def weights():
    return random_weights(TINY, seed=0)


def _raises(error, says, call):
    with pytest.raises(error) as e:
        call()
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


# --- the kernels' host wrappers ------------------------------------------------------------------------------
def _elementwise(name):
    """A call of each wrapper that exposes block_size, and what it should give."""
    x, y = torch.randn(3000, device=DEV), torch.randn(3000, device=DEV)
    g, u = torch.randn(5, 600, device=DEV), torch.randn(5, 600, device=DEV)
    return {"add": (lambda bs: kernels.get("vector_add", "add", "solutions")(x, y, block_size=bs), x + y),
            "residual_add": (lambda bs: kernels.get("residual", "residual_add", "solutions")(x, y, block_size=bs),
                             x + y),
            "swiglu": (lambda bs: kernels.get("swiglu", "swiglu", "solutions")(g, u, block_size=bs),
                       torch.nn.functional.silu(g) * u),
            "swiglu_merged": (lambda bs: kernels.get("swiglu", "swiglu_merged", "solutions")(
                torch.cat([g, u], 1), block_size=bs), torch.nn.functional.silu(g) * u)}[name]


@pytest.mark.parametrize("name", ["add", "residual_add", "swiglu", "swiglu_merged"])
def test_block_size_must_be_a_power_of_two_int(name):
    """-1 and -1024 launched no program and returned the output as allocated (errors of 1e22 and more); 0, 3,
    1.5, None and "1024" failed inside the launch; True ran as 1."""
    run, expected = _elementwise(name)
    for bad in (-1, -1024, 0, 3, 2**21):
        _raises(ValueError, f"block_size must be a power of two from 1 to 2**20, got {bad}", lambda: run(bad))
    for bad in (1.5, None, "1024", True):
        _raises(TypeError, f"block_size must be an int, got {bad!r}", lambda: run(bad))
    torch.testing.assert_close(run(256), expected)


def test_meta_tensors_are_refused_naming_the_device():
    add = kernels.get("vector_add", "add", "solutions")
    x = torch.randn(64, device="meta")
    _raises(ValueError, "inputs on meta (x, y): a meta tensor holds no data", lambda: add(x, x))


def test_an_empty_normalised_dim_is_named():
    """torch's 'cannot reshape tensor of 0 elements' before the wrapper's own check."""
    rms_norm = kernels.get("rmsnorm", "rms_norm", "solutions")
    for shape in ((3, 0), (2, 3, 0)):
        _raises(ValueError, "x's last dim, the normalised dim, is 0",
                lambda: rms_norm(torch.empty(shape, device=DEV), torch.empty(0, device=DEV)))


@pytest.mark.parametrize("M", [1, 3])
def test_an_empty_projection_gives_zeros_or_an_empty_output(M):
    """x @ W.T with K = 0 is zeros, with N = 0 an empty [M, 0]: both were torch's reshape error."""
    linear = kernels.get("linear", "linear", "solutions")
    out = torch.full((M, 48), float("nan"), device=DEV)
    assert linear(torch.empty(M, 0, device=DEV), torch.empty(48, 0, device=DEV), out=out) is out
    assert torch.equal(out, torch.zeros(M, 48, device=DEV))
    assert linear(torch.randn(M, 64, device=DEV), torch.empty(0, 64, device=DEV)).shape == (M, 0)


def test_an_output_may_alias_only_its_own_input():
    """q_out = k passed the check (k was among the inputs an output may be) and k came back wrong by 0.83:
    the programs of q wrote over k while those of k read it."""
    l2norm_qk = kernels.get("deltanet_gates", "l2norm_qk", "solutions")
    q, k = torch.randn(3, 2, 16, device=DEV), torch.randn(3, 2, 16, device=DEV)
    want_q, want_k = l2norm_qk(q, k)
    q_copy, k_copy = q.clone(), k.clone()
    _raises(ValueError, "q_out overlaps k in memory (q_out may be q itself, in place)",
            lambda: l2norm_qk(q, k, q_out=k))
    _raises(ValueError, "k_out overlaps q in memory (k_out may be k itself, in place)",
            lambda: l2norm_qk(q, k, k_out=q))
    assert torch.equal(k, k_copy) and torch.equal(q, q_copy)          # refused before the launch
    q2, k2 = q.clone(), k.clone()                   # each its own input: in place, as before
    l2norm_qk(q2, k2, q_out=q2, k_out=k2)
    torch.testing.assert_close((q2, k2), (want_q, want_k))


def test_the_delta_rules_output_may_not_be_its_initial_state():
    """out may not be initial_state (only final_state may): shapes that coincide (T = HV = DK) let it through."""
    n = 4
    q = k = torch.randn(n, n, n, device=DEV)
    v, a = torch.randn(n, n, n, device=DEV), torch.randn(n, n, device=DEV)
    state = torch.zeros(n, n, n, device=DEV)
    _raises(ValueError, "out overlaps initial_state in memory",
            lambda: validate.delta_rule_gate_inputs(q, k, v, a, a, a[0], a[0], state, state, None, 128))
    validate.delta_rule_gate_inputs(q, k, v, a, a, a[0], a[0], state, None, state, 128)   # in place: allowed


def test_the_recurrent_rules_out_may_not_be_its_initial_state():
    """solutions/delta_rule.py's own check let out be initial_state (only final_state may be): at T = HV = DK = DV
    the shapes coincide and out came back wrong by 0.87."""
    rule = kernels.get("delta_rule", "gated_delta_rule_recurrent", "solutions")
    n = 4
    q, k, v = (torch.randn(n, n, n, device=DEV) for _ in range(3))
    g, beta = -torch.rand(n, n, device=DEV), torch.rand(n, n, device=DEV)
    state = torch.zeros(n, n, n, device=DEV)
    _raises(ValueError, "out overlaps initial_state in memory",
            lambda: rule(q, k, v, g, beta, initial_state=state, out=state))


def test_kv_cache_read_length_must_be_an_int_in_range():
    """2.5 read two rows, True one."""
    read = kernels.get("kv_cache", "kv_cache_read", "solutions")
    kc, vc = torch.randn(16, 2, 4, device=DEV), torch.randn(16, 2, 4, device=DEV)
    for bad in (2.5, True, "3", None):
        _raises(TypeError, f"length must be an int, got {bad!r}", lambda: read(kc, vc, bad))
    _raises(ValueError, "length must be >= 0, got -1", lambda: read(kc, vc, -1))
    _raises(ValueError, "length is 17: cannot read 17 rows from a cache of 16 rows", lambda: read(kc, vc, 17))
    assert torch.equal(read(kc, vc, 16)[0], kc)


# --- the swap check ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ops, kwargs, error, says", [
    ({}, {}, ValueError, "ops is empty"),
    ("rms_norm", {}, TypeError, "ops must be a dict of {reference op name: kernel}, got str"),
    ([("rms_norm", abs)], {}, TypeError, "ops must be a dict of {reference op name: kernel}, got list"),
    ({"rms_norm": abs}, {"seed": 2**70}, ValueError, "seed must be a whole number in [0, 2**63 - 1]"),
    ({"no_such_op": abs}, {}, KeyError, "no reference op named ['no_such_op']")])
def test_compare_greedy_refuses_what_it_cannot_check_before_the_model(monkeypatch, ops, kwargs, error, says):
    """{} printed a PASS of no kernel; a str or a list failed in ** after the reference run, a seed past 64 bits
    in torch's manual_seed."""
    monkeypatch.setattr(swap, "_model", lambda *a: pytest.fail("the model was built"))
    _raises(error, says, lambda: swap.compare_greedy(ops, n_new=1, verbose=False, **kwargs))


# --- the engine and generation ------------------------------------------------------------------------------
@pytest.mark.parametrize("ids", [{5, 17, 42}, frozenset({5, 17}), {5: 0, 17: 0}, {5: 0}.keys()])
def test_prompt_ids_without_an_order_are_refused(weights, ids):
    """A set ran in hash order, a dict as its keys."""
    engine = Engine(TINY, weights, max_seq_len=16)
    model = Qwen35Model(TINY, weights)
    for run in (lambda: engine.generate(ids, 3), lambda: generate(model, ids, 3)):
        _raises(TypeError, "prompt_ids must be token ids in order", run)


@pytest.mark.parametrize("flag, value", [("cuda_graph", "no"), ("prefill_graph", 1), ("pdl", "no")])
def test_engine_switches_must_be_true_or_false(weights, flag, value):
    """A non-empty string was True."""
    for build in (lambda: Engine.random(TINY, max_seq_len=16, **{flag: value}),
                  lambda: Engine(TINY, weights, max_seq_len=16, **{flag: value})):
        _raises(TypeError, f"{flag} must be True or False", build)


@pytest.mark.parametrize("eos", [-1, 10**6, [2, 512]])
def test_an_eos_token_id_outside_the_vocabulary_is_named(weights, eos):
    """An id no token has never stops the sequence: it was taken without a word."""
    engine = Engine(TINY, weights, max_seq_len=16)
    model = Qwen35Model(TINY, weights)
    bad = eos[-1] if isinstance(eos, list) else eos
    for run in (lambda: engine.generate([5, 17], 3, eos_token_id=eos),
                lambda: generate(model, [5, 17], 3, eos_token_id=eos)):
        _raises(ValueError, f"eos_token_id {bad} is outside the vocabulary [0, 512)", run)


@pytest.mark.parametrize("build, error, says", [
    (lambda w: Engine.random(TINY, dtype=torch.float64), TypeError,
     "dtype must be float32, float16 or bfloat16 for the engine, got torch.float64"),
    (lambda w: Engine(TINY, {n: t.double() for n, t in w.items()}), TypeError,
     "the weights' dtype must be float32, float16 or bfloat16 for the engine"),
    (lambda w: Engine.random(None), TypeError, "config must be a Qwen35Config"),
    (lambda w: Engine(None, w), TypeError, "config must be a Qwen35Config"),
    (lambda w: Engine.random(TINY, prefill_chunk=-5), ValueError, "prefill_chunk must be >= 1, got -5"),
    (lambda w: Engine.random(TINY, device="meta"), ValueError, "device 'meta' makes weights without values"),
    (lambda w: Engine.random(TINY, device="nowhere"), ValueError, "device must be a torch device"),
    (lambda w: Engine.random(TINY, device=f"cuda:{torch.cuda.device_count()}"), ValueError,
     "is not available"),
    (lambda w: Engine.from_pretrained("no/checkpoint", dtype="float32"), TypeError,
     "dtype must be float32, float16 or bfloat16 for the engine, got 'float32'"),
    (lambda w: Engine.from_pretrained("no/checkpoint", dtype=torch.int32), TypeError,
     "dtype must be float32, float16 or bfloat16 for the engine, got torch.int32"),
    (lambda w: Engine(TINY, w, own_weights="no"), TypeError, "own_weights must be True or False, got 'no'")],
    ids=["float64", "float64 weights", "random None", "None", "prefill_chunk", "meta", "nowhere", "no such GPU",
         "a string", "an integer", "own_weights"])
def test_engine_construction_names_a_bad_dtype_config_or_device(weights, build, error, says):
    """float64 was built and refused at the first kernel; None was an AttributeError; -5 said '>= 0' where 0
    is refused too; meta, a device with no CUDA GPU behind it, a misspelt one and a dtype given by its name were
    torch's errors (the last once the checkpoint had been read); an integer dtype read the whole checkpoint and
    listed every tensor, one line each; own_weights="no" dropped the caller's projections."""
    _raises(error, says, lambda: build(weights))
