"""The lab (lab/): the experiments that measured the course's choices on a GPU.

The probes run only on a GPU machine. Here every one parses and writes itself up (question, method,
result, verdict), lab/README.md indexes it, the kernels they time compute what they should under the
interpreter, the GEMV sweep's plot (which runs anywhere) draws, and scripts/ holds the tools only.
"""
import ast
import importlib
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab"
PROBES = sorted(p.stem for p in LAB.glob("*.py") if p.name not in ("__init__.py", "common.py"))
PARTS = ("Question:", "Method:", "Result:", "Verdict:")


def _probe(name):
    return importlib.import_module(f"lab.{name}")


def _parts(name) -> dict:
    """A probe's write-up: each of PARTS (a line that starts with it) up to the next."""
    doc = ast.get_docstring(ast.parse((LAB / f"{name}.py").read_text())) or ""
    starts = {part: m.start() for part in PARTS if (m := re.search(rf"^{part}", doc, re.M))}
    assert list(starts) == list(PARTS) and sorted(starts.values()) == list(starts.values()), \
        f"lab/{name}.py: its docstring needs {', '.join(PARTS)}, each at the start of a line, in that order"
    ends = list(starts.values())[1:] + [len(doc)]
    return {part: doc[start + len(part):end].strip() for (part, start), end in zip(starts.items(), ends)}


def test_scripts_parse_and_the_sweep_plots(tmp_path):
    """The GPU scripts and probes run only on a GPU machine: here at least every one parses, and the GEMV
    sweep's plot (which runs anywhere) draws a result file."""
    for sh in sorted((ROOT / "scripts").glob("*.sh")):
        assert subprocess.run(["bash", "-n", str(sh)]).returncode == 0, sh.name
    for py in sorted((ROOT / "scripts").glob("*.py")) + sorted(LAB.glob("*.py")):
        compile(py.read_text(), str(py), "exec")
    row = {"BLOCK_N": 2, "BLOCK_K": 1024, "num_warps": 4, "us": 4.5, "GBps": 2330.0}
    case = {"kind": "gemv", "N": 5120, "K": 1024, "bytes": 10485760, "hand": row, "hand_row": row,
            "best": [row], "all": [row, {"BLOCK_N": 1, "BLOCK_K": 256, "num_warps": 1, "error": "x"}]}
    path = tmp_path / "gemv_sweep.json"
    path.write_text(json.dumps({"gpu": "test GPU", "date": "2026-11-30", "cases": [case, case]}))
    _probe("gemv_sweep").plot(str(path))
    assert (tmp_path / "gemv_sweep.png").stat().st_size > 10_000


# The GPU probes whose kernels are timed on a GPU only: each probe's `check()` runs its kernel under the
# interpreter here (odd shapes, NaN-poisoned outputs, fp64 references: see each check's docstring) and
# returns the largest relative error. A grid barrier cannot run under the interpreter, where programs run
# one after another: mlp_block and layer_phases check their phases as separate launches; l2_prefetch's
# prefetch is inline PTX, compiled out there. On the GPU each probe records its own check in its JSON.
PROBES_CHECKED = {
    "gemv_persistent_probe.py": "a persistent, software-pipelined GEMV",
    "l2_prefetch_probe.py": "chapter 05_projections's GEMV that prefetches the next weight into L2",
    "mlp_block_probe.py": "the MLP sublayer as one kernel",
    "layer_phases_probe.py": "the fast level's kernels as phases of one kernel",
    "gemv_bounds_probe.py": "a GEMV cut down step by step (the x-only form's row sums too)",
    "gemv_tma_probe.py": "a GEMV over a tensor descriptor, tiles past both edges",
    "unrolled_gemv_probe.py": "the fused GEMV's two walks along K",
    "pdl_chain_probe.py": "the whole-tile GEMV in every PDL mode (the PDL calls are no-ops there)",
    "qkv_merge_probe.py": "chapter 05_projections's projections, merged and separate (the merged GEMV bit for bit)",
    "rope_trig_probe.py": "RoPE from a cos/sin table and from tl.cos / tl.sin in fp32 and fp64",
    "pdl_variants_probe.py": "the LM head's GEMV with and without the PDL calls",
    "flash_decoding_prefetch_probe.py": "FlashDecoding with the past rows loaded before the wait, odd lengths",
    "attention_launch_probe.py": "the one-launch attention against the prologue, split and merge kernels",
    "deltanet_pdl_probe.py": "the recurrence at each value block and warp count and with its trigger moved; the merge "
                             "as it was, the split and the q/k prologue triggering at their end, bit for bit; the "
                             "tiny engine's tokens",
    "family_tile_probe.py": "the whole-tile cap and the rule before the fill where the solutions read them, undone "
                            "after",
    "splitk_pdl_probe.py": "the split-K GEMV + residual both ways, the counts reset; the tiny engine's tokens",
    "prompt_gemm_sweep.py": "the tensor-descriptor GEMM's three epilogues at odd shapes",
    "quant_tile_probe.py": "the 8-bit tile variant where the solutions read it, undone after",
    "quant_gemm_probe.py": "the 8-bit TMA GEMM computing W x^T, int8 and fp8, odd shapes",
    "delta_rule_kernels_probe.py": "the chunked rule at every chunk size and value block it times, a short last chunk",
    "delta_rule_fused_probe.py": "the one-launch rule against the three kernels; the tiny engine's logits with it",
    "delta_rule_prepare_probe.py": "the blocked UT transform's w, u and g against chunk_prepare; the rule with it",
    "delta_rule_operands_probe.py": "the 16-bit-operand and split first kernels' w and u; the rule with each",
    "multistep_graph_probe.py": "the ring kernel that keeps each step's token and flag",
    "quant_group_probe.py": "the per-group GEMV over several groups a step against quant_gemv, odd shapes",
    "recurrence_chain_probe.py": "the one-round recurrence against the fp64 rule; the tiny engine's tokens with it",
    "prefill_graph_probe.py": "the tiny engine's prompt in layer pieces against the whole chunk, bit for bit",
    "gemm_clusters_probe.py": "the GEMM + residual at each tile it times, odd shapes, NaN-poisoned output",
    "prompt_splitk_probe.py": "the two-kernel split-K GEMM + residual at odd shapes, pieces past K, NaN-poisoned",
    "prompt_pdl_prologue_probe.py": "the three prompt GEMMs edited to ask L2 for their weight rows before the PDL "
                                    "wait, odd shapes, NaN-poisoned outputs; the tiny engine's tokens with them",
    "prompt_gaps_probe.py": "the gap accounting on a made-up timeline: head, busy time with overlap counted once, "
                            "gaps, tail",
    "qk_prologue_tile_probe.py": "the q/k prologue on a tile of tokens against the course's kernel, odd shapes, "
                                 "positions reversed, NaN-poisoned outputs",
    "decode_end_probe.py": "the argmax merge that advances the counters against torch.argmax; the tiny engine's "
                           "tokens with the norm in the LM head and the advance in the merge",
}


@pytest.mark.parametrize("script", PROBES_CHECKED)
def test_a_gpu_probes_kernel_computes_what_it_times(rt, script):
    if rt.mode == "gpu":
        pytest.skip("checked on the GPU by the probe itself (check_rel_err in its JSON)")
    probe = _probe(Path(script).stem)
    assert probe.check() < 1e-6, PROBES_CHECKED[script]


def test_the_prefill_probes_split_k_gemm_is_right_and_deterministic(rt):
    """The split-K GEMM + residual of lab/prefill_probe.py (timed on a GPU only): under the interpreter,
    odd shapes, in place, two calls bit-identical (the per-tile counters reset themselves)."""
    if rt.mode == "gpu":
        pytest.skip("checked on the GPU by the probe itself (check in its JSON)")
    err, same = _probe("prefill_probe").check()
    assert err < 1e-6 and same


def _data_files(text: str) -> list[Path]:
    """The files a write-up names under lab/results/ (a `{json,md}` alternative or a `*` expanded)."""
    found = []
    for ref in re.findall(r"lab/results/[\w./*{},-]+", text):
        ref = ref.rstrip(".,")
        alternatives = re.fullmatch(r"(.*)\{(.*)\}(.*)", ref)
        names = ([alternatives[1] + alt + alternatives[3] for alt in alternatives[2].split(",")] if alternatives
                 else [ref])
        for name in names:
            matches = sorted(ROOT.glob(name))
            assert matches, f"{name} does not exist"
            found += matches
    return found


@pytest.mark.parametrize("name", PROBES)
def test_every_probe_writes_itself_up_and_is_indexed(name):
    """Its docstring: how to run it, then the question, the method, the result (figures from its data in
    lab/results/, with the GPU and the date they were measured on) and the verdict (adopted where, or
    not); and a row in lab/README.md's index."""
    doc = ast.get_docstring(ast.parse((LAB / f"{name}.py").read_text()))
    assert f"python -m lab.{name}" in doc, f"lab/{name}.py: its usage line runs it as a module"
    parts = _parts(name)
    assert all(parts.values()), f"lab/{name}.py: an empty part"
    if parts["Result:"].startswith("not measured yet"):
        # written before its GPU run: the result says how to run it, and its figures come with that run
        assert f"python -m lab.{name}" in parts["Result:"], f"lab/{name}.py: its result says how to measure it"
    else:
        data = _data_files(parts["Result:"])
        assert data, f"lab/{name}.py: its result names no data file under lab/results/"
        for path in data:
            if path.suffix == ".json" and isinstance(saved := json.loads(path.read_text()), dict):
                for key in ("gpu", "date"):
                    assert key not in saved or saved[key] in parts["Result:"], \
                        f"lab/{name}.py: its result does not say the {key} of {path.name} ({saved[key]})"
    verdict = parts["Verdict:"]
    assert "adopt" in verdict, f"lab/{name}.py: the verdict says whether it was adopted"
    assert re.search(r"\b(solutions|tritonllm_course|lab)/", verdict), \
        f"lab/{name}.py: the verdict names where (a file of solutions/, tritonllm_course/ or lab/)"
    assert f"{name}.py" in _readme_rows(), f"lab/README.md has no row for lab/{name}.py"


def _links(text: str) -> tuple[list[str], dict[str, str]]:
    """(the inline link targets, the reference definitions: label -> target) of a markdown text."""
    inline = re.findall(r"\]\(([^)\s]+)\)", text)
    return inline, {m[1].lower(): m[2] for m in re.finditer(r"^\[([^\]]+)\]:\s*(\S+)", text, re.M)}


def _readme_rows() -> dict[str, str]:
    """lab/README.md's table rows by what they link (inline, `[text][label]` or a shortcut `[label]`)."""
    text = (LAB / "README.md").read_text()
    _, refs = _links(text)
    rows = {}
    for row in (ln for ln in text.splitlines() if ln.startswith("|")):
        labels = re.findall(r"\]\[([^\]]+)\]", row) + re.findall(r"\[([^\]]+)\](?![\[(])", row)
        for target in _links(row)[0] + [refs[lb.lower()] for lb in labels if lb.lower() in refs]:
            rows[target] = row
    return rows


def test_the_lab_readme_links_what_exists_every_data_file_and_every_engine_run():
    readme = (LAB / "README.md").read_text()
    inline, refs = _links(readme)
    for target in inline + list(refs.values()):
        if "://" not in target:
            assert (LAB / target.split("#")[0]).exists(), f"lab/README.md links {target}, which does not exist"
    rows = _readme_rows()
    for run in sorted((LAB / "results" / "engine_runs").iterdir()):
        assert f"results/engine_runs/{run.name}/" in rows, f"lab/README.md's changelog has no row for {run.name}"
    for data in sorted((LAB / "results").glob("*.*")):
        assert f"results/{data.name}" in refs.values(), f"lab/README.md does not link lab/results/{data.name}"


def test_probes_write_to_lab_results_by_default():
    common = _probe("common")
    assert common.out_dir([]) == str(LAB / "results") and common.out_dir(["elsewhere"]) == "elsewhere"


def test_scripts_keeps_the_tools_and_the_extras_driver_runs_what_exists():
    scripts = ROOT / "scripts"
    left = [p.name for p in scripts.iterdir()
            if p.stem in PROBES or p.name.endswith(("_probe.py", "_sweep.py")) or p.name.startswith("gpu_extra_")]
    assert not left, f"experiments belong in lab/, one driver in scripts/gpu_extras.sh: {left}"
    driver = (scripts / "gpu_extras.sh").read_text()
    names = subprocess.run(["bash", str(scripts / "gpu_extras.sh"), "--list"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert names and all(re.search(rf"^{n}\(\) \{{", driver, re.M) for n in names), names
    assert all(re.search(rf"^# {n}\s", driver, re.M) for n in names), "every extra has a row in its table"
    for module in re.findall(r"-m lab\.(\w+)", driver):
        assert module in PROBES, f"scripts/gpu_extras.sh runs lab.{module}, which is not there"
    for module in re.findall(r"-m (tritonllm_course[\w.]*)", driver):
        assert importlib.util.find_spec(module), f"scripts/gpu_extras.sh runs {module}, which is not there"
    assert "gpu_extra_*.sh" not in (scripts / "gpu_check.sh").read_text()
