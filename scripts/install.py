#!/usr/bin/env python3
"""Install the course: the pinned requirements, or, where a CUDA torch is already installed, everything
but torch and triton (which are kept as they are).

  python3 scripts/install.py --venv .venv   # what `make lab` / `make test` run: creates the venv first
  python scripts/install.py --colab         # Colab's first cell: into the running Python, torch untouched
  python3 scripts/install.py --venv .venv --window 3.5.0 --transformers 5.23.0   # `make test-window`: .venv's set
                                                        # with triton 3.5.0 and transformers 5.23.0

On Colab every package of the skip list that the runtime has stays as it is (torch, triton, its notebook
stack), and the rest comes from pyproject.toml's ranges, not the exact pins: a transformers inside the
course's window is Colab's own and kept. Where an installed package is replaced, the installer says which,
from which version to which, before pip runs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ("torch", "triton")             # never reinstalled where a CUDA build is present
# Colab has its own notebook stack (its widget manager, its matplotlib): only what it lacks is installed
COLAB_SKIP = KEPT + ("jupyterlab", "nbval", "pytest", "numpy", "ipykernel", "ipywidgets", "matplotlib")


def cuda_torch(python: str) -> dict | None:
    """{'torch': version, 'triton': version} when `python` has a CUDA build of torch, else None."""
    code = ("import json, torch\nimport importlib.metadata as m\n"
            "v = {'torch': m.version('torch')}\n"
            "try: v['triton'] = m.version('triton')\nexcept m.PackageNotFoundError: pass\n"
            "print(json.dumps(v if torch.version.cuda else None))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    import json
    return json.loads(r.stdout.strip().splitlines()[-1])


def name(req: str) -> str:
    """The distribution a requirement names: 'numpy<2.5' -> 'numpy'."""
    return re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0].lower()


def requirements(skip: tuple[str, ...]) -> list[str]:
    """requirements.txt's exact pins, but those of `skip`."""
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    return [ln for ln in lines if ln and name(ln) not in skip]


def dependencies(skip: tuple[str, ...]) -> list[str]:
    """pyproject.toml's `dependencies` (the supported ranges), but those of `skip`."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    return [r for r in re.findall(r'"([^"]+)"', block) if name(r) not in skip]


def installed(python: str, names) -> dict:
    """{name: version} of those of `names` that `python` has."""
    code = ("import json, sys\nimport importlib.metadata as m\nv = {}\nfor n in sys.argv[1:]:\n"
            "    try: v[n] = m.version(n)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(v))")
    r = subprocess.run([python, "-c", code, *names], capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}


def replaced(python: str, args: tuple[str, ...]) -> list[str] | None:
    """'name installed -> new' for each installed package that `pip install args` would change (pip's
    --dry-run --report); None when this pip cannot say (older than 22.2, or the dry run failed)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        r = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--dry-run",
                            "--report", str(report), *args], capture_output=True, text=True)
        if r.returncode != 0 or not report.exists():
            return None
        planned = {item["metadata"]["name"].lower(): item["metadata"]["version"]
                   for item in json.loads(report.read_text()).get("install", [])}
    have = {k.lower(): v for k, v in installed(python, planned).items()}
    return [f"{n} {have[n]} -> {v}" for n, v in sorted(planned.items()) if n in have and have[n] != v]


def pip(python: str, *args: str, announce: bool = False) -> None:
    if announce:   # into a Python that has packages already: say what is replaced before it is
        changes = replaced(python, args)
        if changes is None:
            print("(this pip cannot say beforehand which installed packages it replaces; its log below does)")
        print("replacing " + ", ".join(changes) if changes else "replacing no installed package", flush=True)
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def plan(python: str, keep: dict | None, colab: bool) -> tuple[dict, list[str]]:
    """({package: version} held where it is, [requirements to install]).

    --colab: every package of COLAB_SKIP that the runtime has is held, whatever its build (Colab's torch is
    never reinstalled); the rest comes from pyproject.toml's ranges. A venv beside a CUDA torch holds that
    torch and its triton and takes the other exact pins; a fresh venv takes every pin."""
    if colab:
        held = installed(python, COLAB_SKIP)
        return held, dependencies(tuple(held))
    if keep:
        return dict(keep), requirements(KEPT)
    return {}, requirements(())


def install(python: str, keep: dict | None, colab: bool = False) -> None:
    held, reqs = plan(python, keep, colab)
    if held:
        print("keeping the installed " + ", ".join(f"{k} {v}" for k, v in held.items()))
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("".join(f"{k}=={v}\n" for k, v in held.items()))
        pip(python, "-c", f.name, *reqs, announce=True)
    else:
        pip(python, *reqs)
    pip(python, "--no-deps", "-e", str(ROOT))


def stamp_text() -> str:
    h = hashlib.sha256()
    for f in ("requirements.txt", "pyproject.toml", "scripts/install.py"):
        h.update((ROOT / f).read_bytes())
    return h.hexdigest()


def site_packages(python: str) -> str:
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def window_venv(base: Path, version: str, transformers: str | None = None) -> Path:
    """A venv inside `base` (base/window/triton-VERSION[-transformers-T]) that sees every package of `base` but
    triton, which is VERSION, and transformers, which is T where given: the pinned set beside another end of the
    supported window, for the interpreter (transformers' ends change its loader and its delta-rule functions,
    which the tests compare against).

    Only those are downloaded (no pip cache, nothing outside the clone). Where one cannot be (offline, no such
    release), the error says so and the window is not tested: never a silent pass."""
    name = f"triton-{version}" + (f"-transformers-{transformers}" if transformers else "")
    venv = base / "window" / name
    python = str(venv / "bin" / "python")
    stamp = venv / ".tritonllm-window"
    if stamp.exists() and stamp.read_text() == name:
        return venv
    if not (venv / "bin" / "python").exists():
        subprocess.run([str(base / "bin" / "python"), "-m", "venv", str(venv)], check=True)
    # the new venv's own site-packages come first on sys.path, base's after (and the course's folder)
    Path(site_packages(python), "tritonllm-base.pth").write_text(
        f"{site_packages(str(base / 'bin' / 'python'))}\n{ROOT}\n")
    wanted = {"triton": version, **({"transformers": transformers} if transformers else {})}
    pins = [f"{dist}=={v}" for dist, v in wanted.items()]
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir", "--no-deps",
           "--quiet", *pins]
    print("+", " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        sys.exit(f"install.py: could not install {' '.join(pins)} into {venv} (offline, or no such release "
                 "for this Python): the supported window is NOT tested")
    for dist, want in wanted.items():
        found = subprocess.run([python, "-c", f"import {dist}; print({dist}.__version__)"], capture_output=True,
                               text=True).stdout.strip()
        if found != want:
            sys.exit(f"install.py: {venv} imports {dist} {found or '(none)'}, not {want}")
    stamp.write_text(name)
    return venv


def triton_version(text: str) -> str:
    """--window's VERSION: digits and dots only (3.5.0), since it names a folder of the venv and a pin."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", text):
        raise argparse.ArgumentTypeError(f"VERSION must be a triton version number such as 3.5.0, got {text!r}")
    return text


def transformers_version(text: str) -> str:
    """--transformers' VERSION: digits and dots only (5.23.0), for the same reasons as --window's."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", text):
        raise argparse.ArgumentTypeError(f"VERSION must be a transformers version number such as 5.23.0, got "
                                         f"{text!r}")
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line naming the option, without the usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def main() -> None:
    ap = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", help="create this virtual environment and install into it")
    ap.add_argument("--colab", action="store_true", help="install into the running Python, keep torch")
    ap.add_argument("--window", metavar="VERSION", type=triton_version,
                    help="with --venv (installed): a venv of its packages but triton==VERSION; prints its path")
    ap.add_argument("--transformers", metavar="VERSION", type=transformers_version,
                    help="with --window: transformers==VERSION in that venv too")
    args = ap.parse_args()
    if args.venv is not None and not args.venv.strip():   # Path("") is ".": a venv made in the course's folder
        ap.error("--venv is empty: name the virtual environment's folder (e.g. .venv)")
    if args.transformers and not args.window:
        ap.error("--transformers goes with --window VERSION")
    if args.window:
        if not args.venv or not (Path(args.venv) / ".tritonllm-installed").exists():
            ap.error("--window needs --venv DIR of an installed course (make install)")
        print(window_venv(Path(args.venv).resolve(), args.window, args.transformers))
        return
    if args.colab:
        install(sys.executable, None, colab=True)
        return
    if not args.venv:
        ap.error("give --venv DIR or --colab")
    venv = Path(args.venv)
    stamp = venv / ".tritonllm-installed"
    if stamp.exists() and stamp.read_text() == stamp_text():
        print(f"{venv} is up to date")
        return
    # the venv's own CUDA torch (a learner's GPU workstation: torch first, then `make lab`), else the one of the
    # Python running this, which a new venv sees through --system-site-packages
    exists = (venv / "bin" / "python").exists()
    keep = (exists and cuda_torch(str(venv / "bin" / "python"))) or cuda_torch(sys.executable)
    if not exists:
        cmd = [sys.executable, "-m", "venv", str(venv)] + (["--system-site-packages"] if keep else [])
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    python = str(venv / "bin" / "python")
    install(python, keep)
    stamp.write_text(stamp_text())


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
