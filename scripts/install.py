#!/usr/bin/env python3
"""Install the course: the pinned requirements, or, where a CUDA torch is already installed, everything
but torch and triton (which are kept as they are).

  python3 scripts/install.py --venv .venv   # what `make lab` / `make test` run: creates the venv first
  python scripts/install.py --colab         # Colab's first cell: into the running Python, torch untouched
"""
from __future__ import annotations

import argparse
import hashlib
import os
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


def requirements(skip: tuple[str, ...]) -> list[str]:
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    name = lambda req: req.replace(">", "=").replace("<", "=").split("=")[0].strip().lower()  # noqa: E731
    return [ln for ln in lines if ln and name(ln) not in skip]


def pip(python: str, *args: str) -> None:
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def install(python: str, keep: dict | None, skip: tuple[str, ...]) -> None:
    if keep:
        print(f"keeping the installed CUDA torch {keep.get('torch')} / triton {keep.get('triton')}")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("".join(f"{k}=={v}\n" for k, v in keep.items()))
        pip(python, "-c", f.name, *requirements(skip))
    else:
        pip(python, *requirements(()))
    pip(python, "--no-deps", "-e", str(ROOT))


def stamp_text() -> str:
    h = hashlib.sha256()
    for f in ("requirements.txt", "pyproject.toml", "scripts/install.py"):
        h.update((ROOT / f).read_bytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", help="create this virtual environment and install into it")
    ap.add_argument("--colab", action="store_true", help="install into the running Python, keep torch")
    args = ap.parse_args()
    if args.colab:
        install(sys.executable, cuda_torch(sys.executable) or {}, COLAB_SKIP)
        return
    if not args.venv:
        ap.error("give --venv DIR or --colab")
    venv = Path(args.venv)
    stamp = venv / ".tritonllm-installed"
    if stamp.exists() and stamp.read_text() == stamp_text():
        print(f"{venv} is up to date")
        return
    keep = cuda_torch(sys.executable)
    if not (venv / "bin" / "python").exists():
        cmd = [sys.executable, "-m", "venv", str(venv)] + (["--system-site-packages"] if keep else [])
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    python = str(venv / "bin" / "python")
    install(python, keep, KEPT)
    stamp.write_text(stamp_text())


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
