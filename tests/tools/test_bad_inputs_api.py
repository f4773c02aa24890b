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
from tritonllm_course.weights import load_weights, random_weights

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


# --- sweep 19: the kernels' scalar arguments, empty dims, the engine's steps, the model, weights, tokenizer, check --
def _attention_calls(scale):
    """Every wrapper that takes an attention scale, called with `scale` on small valid tensors."""
    q3, k3 = torch.randn(5, 4, 16, device=DEV), torch.randn(5, 2, 16, device=DEV)
    q2, cache = torch.randn(4, 16, device=DEV), torch.randn(8, 2, 16, device=DEV)
    pos, scores = torch.arange(5, device=DEV), torch.randn(4, 5, 7, device=DEV)
    mask = torch.ones(5, 7, dtype=torch.bool, device=DEV)
    get = lambda family, name: kernels.get(family, name, "solutions")  # noqa: E731
    return [lambda: get("attention", "scaled_softmax")(scores, scale),
            lambda: get("attention", "masked_softmax")(scores, mask, scale),
            lambda: get("attention", "decode_attention")(q2, cache, cache, 3, scale),
            lambda: get("attention", "attention")(q3, k3, k3, pos, scale),
            lambda: get("flash_attention", "flash_attention")(q3, k3, k3, pos, scale),
            lambda: get("flash_decoding", "flash_decoding")(q2, cache, cache, 3, scale)]


@pytest.mark.parametrize("scale, error, says", [
    (None, TypeError, "scale must be a number, got None"), ("0.25", TypeError, "scale must be a number, got '0.25'"),
    (torch.tensor(0.25), TypeError, "scale must be a number, got tensor(0.2500)"),
    (float("nan"), ValueError, "scale must be a finite number, got nan"),
    (float("inf"), ValueError, "scale must be a finite number, got inf")])
def test_an_attention_scale_must_be_a_finite_number(scale, error, says):
    """None and "0.25" failed in the host's `scale * LOG2E` without naming scale, a 0-d tensor inside the launch
    (an InterpreterError), and NaN or inf came back as NaN probabilities without a word."""
    for call in _attention_calls(scale):
        _raises(error, says, call)
    for call in _attention_calls(-0.5):              # any finite scale runs, a negative one too
        assert torch.isfinite(call()).all()


def _sample_logits():
    return torch.randn(2, 300, device=DEV)


@pytest.mark.parametrize("call, error, says", [
    (lambda: kernels.get("attention", "causal_mask", "solutions")(torch.arange(3, device=DEV), "4"), TypeError,
     "kv_len must be an int, got '4'"),
    (lambda: kernels.get("attention", "causal_mask", "solutions")(torch.arange(3, device=DEV), 2.5), TypeError,
     "kv_len must be an int, got 2.5"),
    (lambda: kernels.get("sampling", "argmax", "solutions")(_sample_logits(), num_blocks="2"), TypeError,
     "num_blocks must be an int, got '2'"),
    (lambda: kernels.get("sampling", "sample", "solutions")(_sample_logits(), 0.8, num_blocks=1.5), TypeError,
     "num_blocks must be an int, got 1.5"),
    (lambda: kernels.get("sampling", "sample", "solutions")(_sample_logits(), 0.8, seed=2**70), ValueError,
     "seed must be in [0, 2**63 - 1]"),
    (lambda: kernels.get("sampling", "sample", "solutions")(_sample_logits(), 0.8, seed=True), TypeError,
     "seed must be an int, got True"),
    (lambda: kernels.get("attention", "decode_attention", "solutions")(
        torch.randn(4, 16, device=DEV), *[torch.randn(8, 2, 16, device=DEV)] * 2, 2.5, 0.25), TypeError,
     "length must be an int, got 2.5"),
    (lambda: kernels.get("flash_decoding", "flash_decoding", "solutions")(
        torch.randn(4, 16, device=DEV), *[torch.randn(8, 2, 16, device=DEV)] * 2, True, 0.25), TypeError,
     "length must be an int, got True"),
    (lambda: kernels.get("flash_decoding", "flash_decoding", "solutions")(
        torch.randn(4, 16, device=DEV), *[torch.randn(8, 2, 16, device=DEV)] * 2, 3, 0.25, num_splits="2"),
     TypeError, "num_splits must be an int, got '2'"),
    (lambda: kernels.get("conv1d", "conv1d_l2norm_prefill", "solutions")(
        torch.randn(2, 96, device=DEV), torch.randn(96, 4, device=DEV), None, None, 16), TypeError,
     "key_heads must be an int, got None"),
    (lambda: kernels.get("conv1d", "conv1d_l2norm_prefill", "solutions")(
        torch.randn(2, 96, device=DEV), torch.randn(96, 4, device=DEV), None, 2, 16, value_head_dim=0), ValueError,
     "value_head_dim must be >= 1, got 0"),
    (lambda: kernels.get("conv1d", "conv1d_l2norm_decode", "solutions")(
        torch.randn(1, 96, device=DEV), torch.randn(96, 4, device=DEV), torch.randn(96, 4, device=DEV), 2, 16,
        eps=-1.0), ValueError, "eps must be positive and finite, got -1.0"),
    (lambda: kernels.get("embedding", "embedding", "solutions")(
        torch.tensor([70], device=DEV), torch.randn(64, 8, device=DEV), check_ids="no"), TypeError,
     "check_ids must be True or False, got 'no'")],
    ids=["kv_len str", "kv_len float", "argmax num_blocks", "sample num_blocks", "seed 2**70", "seed True",
         "decode length", "flash length", "num_splits", "key_heads None", "value_head_dim 0", "conv eps",
         "check_ids str"])
def test_the_kernels_integer_and_eps_arguments_are_named(call, error, says):
    """Each failed without naming the argument (a comparison of str and int, `>>` of a float, torch.full's
    OverflowError, an InterpreterError), or ran as something else: a length or kv_len of 2.5 as 2, True as 1, a
    value_head_dim of 0 as head_dim, and the fused conv's eps was not checked at all (-1 normed to NaN)."""
    _raises(error, says, call)


def test_empty_dims_give_an_empty_result_or_a_named_refusal():
    """Each was a ZeroDivisionError in a grid or a scale, torch's "cannot reshape tensor of 0 elements", an
    InterpreterError of arange(0, 0), or a freshly allocated empty tensor called not contiguous."""
    get = lambda family, name: kernels.get(family, name, "solutions")  # noqa: E731
    e = lambda *shape: torch.empty(shape, device=DEV)  # noqa: E731
    assert get("embedding", "embedding")(torch.tensor([1, 2], device=DEV), e(10, 0)).shape == (2, 0)
    q_out, k_out = get("deltanet_gates", "l2norm_qk")(e(3, 2, 0), e(3, 2, 0))
    assert q_out.shape == k_out.shape == (3, 2, 0)
    caches = get("kv_cache", "kv_cache_write")(e(1, 2, 0), e(1, 2, 0), e(4, 2, 0), e(4, 2, 0),
                                               torch.tensor([0], device=DEV))
    assert caches[0].shape == (4, 2, 0)
    assert torch.equal(get("norm_fusion", "gate_up_swiglu")(e(3, 0), e(5, 0), e(5, 0)), torch.zeros(3, 5, device=DEV))
    assert get("norm_fusion", "rms_norm_linear")(torch.randn(3, 8, device=DEV), e(8), e(0, 8)).shape == (3, 0)
    residual = torch.randn(3, 5, device=DEV)
    assert torch.equal(get("layer_fusion", "linear_residual")(e(3, 0), e(5, 0), residual), residual)
    quant = get("quant", "quant_linear")
    int8 = lambda *shape: torch.zeros(shape, dtype=torch.int8, device=DEV)  # noqa: E731
    assert torch.equal(quant(e(3, 0), int8(8, 0), torch.ones(8, device=DEV)), torch.zeros(3, 8, device=DEV))
    assert quant(torch.randn(1, 32, device=DEV), int8(0, 32), e(0)).shape == (1, 0)
    _raises(ValueError, "give at least one channel and one tap", lambda: get("conv1d", "conv1d_decode")(
        torch.randn(1, 8, device=DEV), e(8, 0), e(8, 0)))
    _raises(ValueError, "give at least one channel and one tap", lambda: get("conv1d", "conv1d_prefill")(
        e(3, 0), e(0, 4)))
    _raises(ValueError, "q and k have no heads", lambda: get("delta_rule", "gated_delta_rule_recurrent")(
        e(1, 0, 8), e(1, 0, 8), e(1, 2, 8), e(1, 2), e(1, 2)))
    _raises(ValueError, "x's last dim, the normalised dim, is 0", lambda: get("norm_fusion", "rms_norm_linear")(
        e(1, 0), e(0), e(5, 0)))


def test_prefill_and_decode_check_sampling_seed_and_token_before_any_work(weights, monkeypatch):
    """prefill's seed and sampling were not checked: None or "1" failed in `seed % 2**31` and a dict as an
    AttributeError, both after the prompt had run; 1.5 and 2**70 were taken. decode's sampling likewise, and its
    token True was called prompt_ids[0]. A Sampling made by hand took a NaN temperature."""
    from tritonllm_course.engine import Sampling
    engine = Engine(TINY, weights, max_seq_len=16)
    monkeypatch.setattr(engine, "_prefill", lambda *a: pytest.fail("the prompt ran"))
    monkeypatch.setattr(engine, "_decode", lambda *a: pytest.fail("the step ran"))
    for seed, error, says in ((None, TypeError, "seed must be an int, got None"),
                              ("1", TypeError, "seed must be an int, got '1'"),
                              (1.5, TypeError, "seed must be an int, got 1.5"),
                              (2**70, ValueError, "seed must be in [0, 2**63 - 1]")):
        _raises(error, says, lambda: engine.prefill([5, 17], seed=seed))
    _raises(TypeError, "sampling must be a Sampling(temperature, top_k, top_p) or None",
            lambda: engine.prefill([5, 17], sampling={"temperature": 0.8}))
    _raises(ValueError, "temperature must be a finite number >= 0, got nan", lambda: Sampling(float("nan")))
    _raises(ValueError, "top_p must be in (0, 1], got 0.0", lambda: Sampling(0.8, 0, 0.0))
    engine.length = 1                                  # as after a prompt
    _raises(TypeError, "sampling must be a Sampling", lambda: engine.decode(sampling=1))
    _raises(TypeError, "token must be an int, got True", lambda: engine.decode(True))
    assert engine.streams == 0


def test_a_sparse_prompt_is_refused_by_both_backends(weights):
    """tolist() of a sparse tensor was a RuntimeError: "Cannot access data pointer"."""
    ids = torch.tensor([5, 17]).to_sparse()
    for run in (lambda: Engine(TINY, weights, max_seq_len=16).generate(ids, 2),
                lambda: generate(Qwen35Model(TINY, weights), ids, 2)):
        _raises(TypeError, "prompt_ids must be a dense tensor, got layout sparse_coo", run)


def test_the_model_checks_its_cache_and_switch(weights):
    """A dict as the cache was an AttributeError, a cache of another dtype a RuntimeError in the first layer's
    index_put, all_logits="no" was true; new_cache(1.5), ("3") and (True) failed in torch's zeros, a
    comparison and a view."""
    model = Qwen35Model(TINY, weights)
    _raises(TypeError, "cache must be a Qwen35Cache (model.new_cache(max_seq_len)) or None, got dict",
            lambda: model([5], cache={}))
    other = Qwen35Model(TINY, {n: t.half() for n, t in weights.items()}).new_cache(4)
    _raises(ValueError, "cache holds float16 on cpu; this model runs float32 on cpu", lambda: model([5], other))
    _raises(TypeError, "all_logits must be True or False, got 'no'", lambda: model([5], all_logits="no"))
    for bad in (1.5, "3", True):
        _raises(TypeError, f"max_seq_len must be an int, got {bad!r}", lambda: model.new_cache(bad))
    assert model([5, 17], model.new_cache(4), all_logits=True).shape == (2, TINY.vocab_size)


@pytest.mark.parametrize("name", ["embed_tokens.weight", "norm.weight", "layers.1.self_attn.q_proj.weight"])
def test_the_engine_refuses_a_weight_that_is_not_contiguous_before_any_work(weights, name):
    """The embedding or a norm as a strided view ran until the first prompt and failed there, naming the kernel's
    argument ("weight must be contiguous"); the reference model takes any strides."""
    t = weights[name]
    view = t.t().contiguous().t() if t.dim() == 2 else torch.stack([t, t], 1)[:, 0]   # same values, strided
    given = {**weights, name: view}
    _raises(ValueError, f"tensor {name} is not contiguous (strides {tuple(view.stride())}",
            lambda: Engine(TINY, given, max_seq_len=8))
    assert Qwen35Model(TINY, given)([5, 17]).shape == (1, TINY.vocab_size)


@pytest.mark.parametrize("edit, error, says", [
    (lambda w: (None, w), TypeError, "config must be a Qwen35Config"),
    (lambda w: (TINY, list(w.items())), TypeError, "weights must be a dict of {name: tensor}"),
    (lambda w: (TINY, {**w, "norm.weight": w["norm.weight"].numpy()}), ValueError,
     "norm.weight is a ndarray, not a torch.Tensor"),
    (lambda w: (TINY, {**w, "layers.0.mlp.up_proj.weight": w["layers.0.mlp.up_proj.weight"].to("meta")}),
     ValueError, "tensor layers.0.mlp.up_proj.weight is on meta, the embedding on cpu"),
    (lambda w: (TINY, {**w, "layers.1.self_attn.o_proj.weight": w["layers.1.self_attn.o_proj.weight"].half()}),
     ValueError, "tensor layers.1.self_attn.o_proj.weight has dtype float16, the embedding float32"),
    (lambda w: (TINY, {**w, "norm.weight": w["norm.weight"].to(torch.float8_e4m3fn)}), ValueError,
     "tensor norm.weight has dtype float8_e4m3fn; weights must be floating point")],
    ids=["no config", "a list", "a numpy array", "a meta tensor", "a float16 matrix", "float8"])
def test_weights_given_directly_are_checked_by_type_device_and_dtype(weights, edit, error, says):
    """None as the config was an AttributeError in the reference model; a list, "not iterable" or every tensor
    missing; a numpy array an AttributeError; a meta tensor among CPU ones ran and gave token 0 in the reference
    model; a float16 matrix among float32 failed in a matmul or a kernel ("x has dtype float32; expected
    float16") mid-prompt; a float8 norm in aminmax, "not implemented for 'Float8_e4m3fn'"."""
    config, given = edit(dict(weights))
    for build in (Qwen35Model, Engine):
        _raises(error, says, lambda: build(config, given))


def test_the_tokenizer_takes_text_and_one_sequence_of_ids(tmp_path):
    """decode("12") gave the text of ids [1, 2], floats were truncated, bools, bytes and a set read as ids;
    encode(5) was an AttributeError inside the implementation; tokenizer.json nested too deep a RecursionError."""
    from tritonllm_course.tokenizer import Tokenizer, load_tokenizer

    class Letters:
        def encode(self, text):
            return [ord(c) - 97 for c in text]

        def decode(self, ids):
            return "".join(chr(97 + i) for i in ids)
    tok = Tokenizer(Letters(), "letters", vocab_size=26)
    for bad, error, says in (("12", TypeError, "ids must be token ids (a list of ints or a 1-D int tensor), got a str"),
                             ([1.7], TypeError, "ids[0] must be an int token id, got 1.7"),
                             ([True], TypeError, "ids[0] must be an int token id, got True"),
                             (b"ab", TypeError, "got a bytes"), ({1, 2}, TypeError, "got a set"),
                             (torch.tensor([[1, 2]]), ValueError, "ids must be one sequence")):
        _raises(error, says, lambda: tok.decode(bad))
    assert tok.decode(torch.tensor([7, 8])) == tok.decode(range(7, 9)) == "hi"
    _raises(TypeError, "text must be a str, got int", lambda: tok.encode(5))
    _raises(ValueError, "text is not valid Unicode: '\\udcff' at index 1", lambda: tok.encode("a\udcff"))
    (tmp_path / "tokenizer.json").write_text("[" * 100_000 + "]" * 100_000)
    try:                                      # the fallback, where the optional package is installed
        assert isinstance(load_tokenizer(tmp_path), Tokenizer)
    except ImportError as e:
        assert "has no usable tokenizer (RecursionError" in str(e)


def _fn_args(**kwargs):
    """check_fn's arguments with CPU tensors, so on the CPU (check_fn's default device is a GPU where one is)."""
    return {"device": "cpu", "fn": lambda x, out: out.copy_(x), "reference": lambda x: x,
            "make_inputs": lambda shape, dtype, device, gen: {"x": torch.randn(3, dtype=dtype, generator=gen)},
            "make_out": lambda inputs: {"out": torch.empty(3, dtype=inputs["x"].dtype)}, **kwargs}


@pytest.mark.parametrize("kwargs, error, says", [
    ({"seed": 2**70}, ValueError, "seed must be in [0, 2**63 - 1]"),
    ({"seed": "a"}, TypeError, "seed must be an int, got 'a'"),
    ({"dtype": torch.float64}, ValueError, "dtype torch.float64 has no default tolerance: give tol="),
    ({"tol": "1"}, TypeError, "tol must be a number, got '1'"),
    ({"reference": None}, TypeError, "reference must be callable, got None"),
    ({"exact": "yes"}, TypeError, "exact must be True or False, got 'yes'"),
    ({"mutated": "x"}, TypeError, "mutated must be a tuple of input names, got 'x'"),
    ({"mutated": ("y",)}, ValueError, "mutated names ['y'], which make_inputs does not return"),
    ({"shape": [3]}, TypeError, "shape must be a dict of dims"),
    ({"device": "meta"}, ValueError, "device 'meta' makes inputs without values, nothing to check"),
    ({"device": "nowhere"}, ValueError, "device must be a torch device"),
    # 4 PB: past the 128 TB of an x86-64 process's addresses, so no allocator grants it, overcommit or not (10**13
    # floats, 40 TB, were granted on a GPU machine, and the check ran into them)
    ({"shape": {"n": 10**15}, "make_inputs": lambda shape, dtype, device, gen: {"x": torch.empty(shape["n"])}},
     MemoryError, "shape n=1000000000000000: its inputs do not fit in the"),
    ({"make_inputs": lambda *a: [torch.ones(3)]}, TypeError, "make_inputs must return a dict"),
    ({"reference": lambda x: None}, TypeError, "reference must return a tensor or a tuple of tensors, got NoneType"),
    ({"reference": lambda x: x > 0, "make_out": lambda inputs: {"out": torch.empty(3, dtype=torch.bool)}}, TypeError,
     "make_out's out is a bool buffer, which the check cannot poison")],
    ids=["seed 2**70", "seed str", "float64", "tol str", "reference None", "exact", "mutated str", "mutated unknown",
         "shape list", "device meta", "device unknown", "shape too large", "inputs list", "reference None out",
         "bool out"])
def test_check_fn_names_a_bad_argument(kwargs, error, says):
    """Each was an error that named nothing ("Overflow when unpacking long long", "can only concatenate str",
    KeyError: torch.float64, "'list' object has no attribute 'items'", "'NoneType' object is not callable", "torch.bool
    is not supported by torch.iinfo"), or was read as something else: exact="yes" as true, mutated="x" as its
    letters."""
    from tritonllm_course.checking import check_fn
    args = _fn_args(**kwargs)
    _raises(error, says, lambda: check_fn(args.pop("fn"), args.pop("reference"), args.pop("make_inputs"), **args))


def test_check_fn_and_check_still_take_what_they_took():
    """A dtype outside the defaults with a tol of its own, and a dtype by name, run as before."""
    import tritonllm_course as tc
    from tritonllm_course.checking import check_fn
    for dtype, tol in ((torch.float64, 1e-12), ("float32", None)):
        args = _fn_args(dtype=dtype, tol=tol, seed=3)
        assert check_fn(args.pop("fn"), args.pop("reference"), args.pop("make_inputs"), **args).passed
    _raises(ValueError, "dtype must be one of", lambda: tc.check("ln1", "solutions", dtype={"float32"}))
    _raises(ValueError, "seed must be in [0, 2**63 - 1]", lambda: tc.check("ln1", "solutions", seed=2**70))


@pytest.mark.parametrize("call, error, says", [
    (lambda: load_weights("no/checkpoint", dtype="float16"), TypeError,
     "dtype must be None (as stored), float32, float16, bfloat16 or float64, got 'float16'"),
    (lambda: load_weights("no/checkpoint", dtype=torch.float8_e4m3fn), TypeError,
     "dtype must be None (as stored), float32, float16, bfloat16 or float64, got torch.float8_e4m3fn"),
    (lambda: load_weights("no/checkpoint", device="nowhere"), ValueError, "device must be a torch device"),
    (lambda: load_weights("no/checkpoint", device=f"cuda:{torch.cuda.device_count()}"), ValueError,
     "is not available"),
    (lambda: load_weights(None), TypeError, "source must be a checkpoint directory or a hub id, got NoneType"),
    (lambda: random_weights(TINY, device="nowhere"), ValueError, "device must be a torch device"),
    (lambda: random_weights(TINY, device="meta"), ValueError, "device 'meta' makes weights without values"),
    (lambda: Engine(TINY, random_weights(TINY), max_seq_len=8, merged="x"), TypeError,
     "merged must be another engine's merged weights (engine.weights) or None, got str")],
    ids=["dtype str", "dtype float8", "no device", "no such GPU", "source None", "random device", "random meta",
         "merged"])
def test_loaders_name_a_bad_dtype_device_or_source_before_reading(call, error, says):
    """load_weights' dtype was not checked: a string failed in torch.empty, an int dtype listed every tensor, float8
    crashed in aminmax; a misspelt device, "cuda" without CUDA, and random_weights' meta were torch's RuntimeError or
    AssertionError; None as the source "expected str, bytes or os.PathLike"; merged="x" an AttributeError."""
    _raises(error, says, call)


def test_the_swap_check_names_a_bad_flag_or_op_name(monkeypatch):
    """verbose="no" printed the report; a name with a leading underscore (__init__) was taken and swapped nothing."""
    monkeypatch.setattr(swap, "_model", lambda *a: pytest.fail("the model was built"))
    _raises(TypeError, "verbose must be True or False, got 'no'",
            lambda: swap.compare_greedy({"rms_norm": abs}, n_new=1, verbose="no"))
    _raises(KeyError, "no reference op named ['__init__']", lambda: swap.compare_greedy({"__init__": abs}, n_new=1))


def test_generate_takes_a_model(weights):
    """An Engine given to generation.generate was an AttributeError ('Engine' has no new_cache) after the prompt
    had been checked; a string, "'str' object has no attribute 'device'"."""
    for model in (Engine(TINY, weights, max_seq_len=8), "tiny"):
        _raises(TypeError, "model must be a Qwen35Model (an Engine generates itself", lambda: generate(model, [5], 2))


def test_the_engines_sources_are_named(weights):
    """sources="solutions" was "dictionary update sequence element #0 has length 1; 2 is required", and a bad
    default_source was called the source of slot 'embedding'."""
    _raises(TypeError, "sources must be a dict of {slot name: source}, got str",
            lambda: Engine(TINY, weights, max_seq_len=8, sources="solutions"))
    _raises(ValueError, "default_source must be one of ('solutions', 'exercises', 'auto', 'reference') or a callable, "
            "got 'bogus'", lambda: Engine(TINY, weights, max_seq_len=8, default_source="bogus"))


def test_a_tensor_stored_twice_is_named(tmp_path):
    """A tensor in two shards (the index naming the first) loaded the copy read last, other values, without a word."""
    from safetensors.torch import load_file, save_file

    from tritonllm_course.hf_compat import hf_model
    from tritonllm_course.weights import WeightError, write_hub_checkpoint
    hf_model(TINY).save_pretrained(tmp_path / "hf")
    hub = write_hub_checkpoint(tmp_path / "hf", tmp_path / "hub", num_shards=2)
    first, second = sorted(hub.glob("*.safetensors"))
    key = next(k for k in load_file(first) if k.endswith("post_attention_layernorm.weight"))
    tensors = load_file(second)
    tensors[key] = load_file(first)[key] + 5.0
    save_file(tensors, second, metadata={"format": "pt"})
    _raises(WeightError, f"tensor {key.removeprefix('model.language_model.')} is stored twice",
            lambda: load_weights(hub))


@pytest.mark.parametrize("config, error, says", [
    ("x", TypeError, "config must be a dict of tile sizes, got str"),
    ({"BLOCK_M": 16.0, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}, TypeError, "config BLOCK_M must be an int"),
    ({"BLOCK_M": 2**30, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}, ValueError,
     "config BLOCK_M = 1073741824: tl.dot tiles need a power of two >= 16 (at most 2**20)"),
    ({"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 3, "num_stages": 1}, ValueError,
     "config num_warps must be a power of two from 1 to 32, got 3"),
    ({"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 0}, ValueError,
     "config num_stages must be an int >= 1, got 0")])
def test_tile_sizes_given_by_hand_are_checked(config, error, says):
    """A string was "dictionary update sequence", 16.0 a TypeError of `&`, 2**30 rows (and linear_act's BLOCK_K of
    0) an InterpreterError, 3 warps and 0 stages were taken (a compile error on a GPU)."""
    q, k, pos = torch.randn(5, 4, 16, device=DEV), torch.randn(5, 2, 16, device=DEV), torch.arange(5, device=DEV)
    _raises(error, says, lambda: kernels.get("flash_attention", "flash_attention", "solutions")(
        q, k, k, pos, 0.25, config=config))
    linear_act = kernels.get("gemm_epilogue", "linear_act", "solutions")
    x, w = torch.randn(3, 16, device=DEV), torch.randn(8, 16, device=DEV)
    _raises(ValueError, "config BLOCK_K = 0: tl.dot tiles need a power of two >= 16",
            lambda: linear_act(x, w, config={"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 0}))


def test_the_delta_rules_launch_options_are_named():
    """block_v=16.0 and chunk_size=64.0 passed `in (16, 32, 64)` and failed inside the launch (an InterpreterError);
    num_warps of 3, 0, 1.5 or "x" ran under the interpreter, which ignores it, to fail on a GPU."""
    def args():
        return (torch.randn(2, 2, 4, device=DEV), torch.randn(2, 2, 4, device=DEV), torch.randn(2, 4, 4, device=DEV),
                -torch.rand(2, 4, device=DEV), torch.rand(2, 4, device=DEV))
    recurrent = kernels.get("delta_rule", "gated_delta_rule_recurrent", "solutions")
    chunked = kernels.get("delta_rule", "gated_delta_rule_chunked", "solutions")
    _raises(TypeError, "block_v must be an int, got 16.0", lambda: recurrent(*args(), block_v=16.0))
    _raises(TypeError, "block_v must be an int, got 16.0", lambda: chunked(*args(), block_v=16.0))
    _raises(TypeError, "chunk_size must be an int, got 64.0", lambda: chunked(*args(), chunk_size=64.0))
    for bad in (3, 0, 1.5, "x"):
        _raises(ValueError, f"num_warps must be a power of two from 1 to 32, got {bad!r}",
                lambda: recurrent(*args(), num_warps=bad))


@pytest.mark.parametrize("name", ["__dict__", "_launch", 5, "rms norm", ""])
def test_kernels_get_takes_a_public_function_name(name):
    """get("rmsnorm", "__dict__") returned the module's namespace; 5 was an unclear error from the loader."""
    _raises(ValueError, "name must be a public function name of the module", lambda: kernels.get("rmsnorm", name))
