#!/usr/bin/env bash
# The GPU check: every test marked `gpu` and the GPU benchmark (benchmarks/gpu_ddp.py), on a
# machine with an NVIDIA GPU, in at most 8 minutes; a short table last.
#
#   bash scripts/gpu-check.sh                   # on the GPU machine, from the checkout
#   GPU_CHECK_DRY=1 bash scripts/gpu-check.sh   # on a machine without one: the same steps,
#                                               # every GPU test skips, the benchmark runs tiny
#
# It needs python3 (or $PYTHON) with torch (a CUDA build on the GPU machine), pyarrow, pandas,
# cloudpickle, fsspec, rich, lightning and transformers; lockstep runs from this checkout
# (src/ goes on PYTHONPATH), nothing is installed. What the tests need besides, when that
# Python lacks it, comes from scripts/wheels/: pytest 9.0.3, pluggy 1.6.0, iniconfig 2.3.0,
# pytest-timeout 2.4.0, psutil 7.2.2, hypothesis 6.155.2 and sortedcontainers 2.4.0 (the
# suite's conftest), accelerate 1.15.0 (transformers' Trainer), each fetched with `pip
# download --no-deps --only-binary=:all: --python-version 3.12 --platform
# manylinux2014_x86_64 NAME==VERSION`. Each missing one is unpacked into a temporary
# directory put on PYTHONPATH. The logs and the benchmark's figures go to $OUT (or a new
# temporary directory), named in the last line. Exit code 0: every test passed and the
# benchmark met its target.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py
