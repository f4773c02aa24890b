"""What 8-bit weights cost in accuracy (chapter 31_weight_quant): the course's reference model in bf16 against the same
model with every linear weight quantized and dequantized, per format (int8 per channel, int8 per group of 128 (of
32 in the small checkpoint), fp8 e4m3 per channel). `python -m tritonllm_course.measure.quant_accuracy --out results`
writes results/quant_accuracy_cpu_<date>.{json,md}; it needs no GPU.

What is quantized: every projection (attention q/k/v/o, DeltaNet in_proj_qkv/z/b/a and out_proj, the MLP's
gate/up/down) and the LM head. Not the norms, the conv1d's taps, A_log or dt_bias (a few KB a layer, read
once a step: no bandwidth to win, and the DeltaNet decay is sensitive). Qwen3.5-0.8B ties the LM head to the
embedding table: the head is quantized, the table the embedding gathers from is not (a gather reads one
2 KB row a token, so its bytes do not count at decode; an engine may keep the bf16 table beside the 8-bit
head, or gather from the 8-bit table, which this run does not measure).

The metric, per position of the prompt: KL(p_bf16 || p_quant) of the next-token distributions (softmax of
the logits, in fp64), and whether the two argmaxes agree. Reported: the mean and the max of the KL over
positions, and the share of positions whose top-1 token is unchanged.

Models: (a) random weights of Qwen3.5-0.8B's real shapes (N(0, 0.02), as transformers initialises);
(b) a small checkpoint in the real file layout, written by transformers (`save_pretrained` of the tiny
config, std 0.1 and perturbed norms as the weight tests write one) and read back by `weights.load_weights`.
Neither is a trained model: random weights give flat next-token distributions, whose KL measures the size of
the quantization error but whose argmax is decided by small margins; a trained checkpoint's figures may
differ, and this run does not claim them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..config import PRESETS
from ..model.qwen35 import Qwen35Model
from ..reference.quant import FORMATS, dequantize, quantize
from ..safe_files import atomic_write_text, check_out_folder, results_folder
from ..validate import check_seed
from ..weights import load_weights, random_weights

GROUP_SIZE = 128
# the linear weights of a layer, by the last part of their name (nn.Linear [out, in] each)
LINEAR_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "in_proj_qkv.weight",
                   "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight", "out_proj.weight",
                   "gate_proj.weight", "up_proj.weight", "down_proj.weight")


def is_linear(name: str) -> bool:
    """Whether the checkpoint tensor `name` (no prefix) is a projection weight the formats quantize."""
    return name.endswith(LINEAR_SUFFIXES)


def fake_quantized(weights: dict, fmt: str, group_size: int = GROUP_SIZE) -> tuple[dict, int, int]:
    """`weights` with every linear weight replaced by dequantize(quantize(W)) in its own dtype.

    returns (weights, linear weights quantized, bytes they take in the 8-bit format with their scales).
    """
    out, count, stored = dict(weights), 0, 0
    for name, w in weights.items():
        if is_linear(name):
            out[name], n_bytes = _round_trip(w, fmt, group_size)
            count, stored = count + 1, stored + n_bytes
    return out, count, stored


def _round_trip(w: torch.Tensor, fmt: str, group_size: int) -> tuple[torch.Tensor, int]:
    q, scale, group = quantize(w, fmt, group_size)
    return dequantize(q, scale, group, torch.float32).to(w.dtype), q.numel() + 4 * scale.numel()


def compare(reference: torch.Tensor, quantized: torch.Tensor) -> dict:
    """KL(p_ref || p_quant) per position (fp64) and top-1 agreement of two [T, vocab] logit tensors."""
    log_p = torch.log_softmax(reference.double(), dim=-1)
    log_q = torch.log_softmax(quantized.double(), dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(dim=-1)                                  # [T]
    agree = reference.argmax(dim=-1) == quantized.argmax(dim=-1)                      # [T]
    return {"kl_mean": kl.mean().item(), "kl_max": kl.max().item(),
            "top1_agreement_pct": 100.0 * agree.double().mean().item(), "positions": int(kl.numel())}


def evaluate(config, weights: dict, ids: torch.Tensor, group_size: int = GROUP_SIZE,
             formats=FORMATS) -> dict:
    """One model against its quantized copies: {format: compare(...) + what was quantized}."""
    model = Qwen35Model(config, weights)
    reference = model.forward(ids, all_logits=True)                                   # [T, vocab]
    rows = {}
    for fmt in formats:
        started = time.perf_counter()
        quant_weights, count, stored = fake_quantized(weights, fmt, group_size)
        quant = Qwen35Model(config, quant_weights)
        head_bytes = 0
        if config.tie_word_embeddings:   # the tied head: its own 8-bit copy, the gathered table untouched
            quant.lm_head_weight, head_bytes = _round_trip(weights["embed_tokens.weight"], fmt, group_size)
        logits = quant.forward(ids, all_logits=True)
        rows[fmt] = {**compare(reference, logits), "linear_weights": count + bool(head_bytes),
                     "weight_bytes_8bit": stored + head_bytes,
                     "group_size": group_size if fmt == "int8_group" else None,
                     "seconds": round(time.perf_counter() - started, 1)}
        del quant, quant_weights
    bf16 = sum(w.numel() * 2 for n, w in weights.items() if is_linear(n))
    if config.tie_word_embeddings:
        bf16 += weights["embed_tokens.weight"].numel() * 2
    return {"weight_bytes_bf16": bf16, "formats": rows}


def prompt_ids(vocab: int, length: int, seed: int = 0) -> torch.Tensor:
    """`length` token ids drawn uniformly from the vocabulary (no tokenizer needed: the weights are random)."""
    return torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(seed))


def run(length: int = 64, seed: int = 0, full: bool = True) -> dict:
    """Both models of the module docstring; `full=False` leaves out the full-size one (a test's quick run)."""
    record = {"what": "next-token KL and top-1 agreement, bf16 reference model vs 8-bit weights",
              "device": "cpu", "gpu": "cpu", "dtype": "bfloat16", "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "group_size": GROUP_SIZE,
              "command": "python -m tritonllm_course.measure.quant_accuracy --out results", "models": {}}
    if full:
        config = PRESETS["qwen3.5-0.8b"]
        ids = prompt_ids(config.vocab_size, length, seed)
        weights = random_weights(config, dtype=torch.bfloat16, seed=seed)
        record["models"]["qwen3.5-0.8b_random"] = {
            "weights": f"random N(0, 0.02), seed {seed}, Qwen3.5-0.8B's shapes",
            "prompt": {"ids": ids.tolist(), "how": f"uniform over the vocabulary, seed {seed}"},
            **evaluate(config, weights, ids)}
        del weights
    with tempfile.TemporaryDirectory() as tmp:
        _write_checkpoint(Path(tmp), seed)
        config, weights = load_weights(tmp, dtype=torch.bfloat16)
    # the tiny config's rows are 128 to 256 wide: groups of 32 give each row 4 to 8 groups
    ids = prompt_ids(config.vocab_size, length, seed)
    record["models"]["tiny_checkpoint"] = {
        "weights": f"transformers Qwen3_5ForCausalLM(tiny config).save_pretrained, std 0.1, norms perturbed by "
                   f"0.3, seed {seed}; group size 32",
        "prompt": {"ids": ids.tolist(), "how": f"uniform over the vocabulary, seed {seed}"},
        **evaluate(config, weights, ids, group_size=32)}
    return record


def _write_checkpoint(path: Path, seed: int) -> None:
    from ..hf_compat import hf_model
    hf_model(PRESETS["tiny"], seed=seed, perturb_norms=0.3, init_std=0.1).save_pretrained(path)


def markdown(record: dict) -> str:
    lines = [f"# 8-bit weights: accuracy ({record['device']}, {record['date']}, torch {record['torch']})", ""]
    for name, model in record["models"].items():
        lines += [f"## {name}: {model['weights']}", "", "| format | KL mean | KL max | top-1 agreement | 8-bit bytes |",
                  "|---|---|---|---|---|"]
        for fmt, row in model["formats"].items():
            lines.append(f"| {fmt} | {row['kl_mean']:.3g} | {row['kl_max']:.3g} | "
                         f"{row['top1_agreement_pct']:.1f}% | {row['weight_bytes_8bit']:,} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results", help="folder of the record (default: results)")
    ap.add_argument("--tokens", type=int, default=64, help="prompt length: positions compared (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small-only", action="store_true", help="leave out the full-size random model")
    args = ap.parse_args(argv)
    most = PRESETS["tiny"].max_position_embeddings   # the small checkpoint runs every time: its limit holds
    try:                  # each refused before the models are built, in one line naming the option
        if not 1 <= args.tokens <= most:
            raise ValueError(f"--tokens must be from 1 to {most} (the small checkpoint's max_position_embeddings), "
                             f"got {args.tokens}")
        check_seed(args.seed, "--seed")
        check_out_folder(args.out)
    except ValueError as e:   # UnsafeWrite is one
        print(f"quant_accuracy: error: {e}", file=sys.stderr)
        return 2
    record = run(args.tokens, args.seed, full=not args.small_only)
    out = results_folder(args.out)
    stem = out / f"quant_accuracy_cpu_{record['date']}"
    atomic_write_text(stem.with_suffix(".json"), json.dumps(record, indent=1) + "\n")
    atomic_write_text(stem.with_suffix(".md"), markdown(record))
    print(markdown(record))
    print(f"written to {stem}.{{json,md}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
