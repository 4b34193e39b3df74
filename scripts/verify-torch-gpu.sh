#!/usr/bin/env bash
# The PyTorch trainer core on a GPU machine, without Temporal (issue 32, item 7): the GRPO golden fixture's parity on
# CUDA (plain and under FSDP2), then SmolLM2-135M- and Qwen2.5-0.5B-shaped GRPO steps in bf16 autocast (full and LoRA)
# with positions/s, peak memory and achieved TFLOP/s. Needs python3 with torch, transformers, peft and safetensors (the
# lent GPU machines have them; no Node, no registry). Under 5 minutes on an H200. Output: gpu-check.json in $OUT (or
# the folder given with --out). Extra arguments go to python/cm2_torch/cm2_torch/gpu_check.py (--small, --device cpu,
# --skip SECTION).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${CM2_TORCH_PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python/cm2_torch${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec "$PY" -m cm2_torch.gpu_check "$@"
