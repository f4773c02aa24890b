#!/usr/bin/env bash
# Download the wheels of scripts/gpu_wheels.txt into .whl/ (git-ignored) for an offline GPU machine
# running CPython 3.12 on x86-64. scripts/gpu_check.sh installs them from there into /tmp/site.
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
mkdir -p .whl
grep -v '^#' scripts/gpu_wheels.txt | grep -v '^$' | while read -r pkg; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl "$pkg"
done
du -sh .whl
