#!/usr/bin/env bash
# Create (once) the Python virtual environment with PyTorch that the
# maintainer's GPT-2 reference (scripts/gpt2-reference.py) and the peer
# benchmarks (scripts/gpt2-bench.sh, scripts/peer-bench.sh) run in, and
# print its interpreter's path on stdout, so that callers can write
#     "$(scripts/py-torch-env.sh)" scripts/gpt2-reference.py
# Everything else this script says goes to stderr.
#
# The environment lives in the git-ignored target/py-torch and never touches
# the system Python; `cargo test` never needs it. Every package is pinned,
# transitive ones included (this list is `pip freeze` of the environment
# plus setuptools), so that regenerating tests/fixtures/gpt2_reference.json
# on another machine resolves the same code.
#
# Size: PyPI's Linux torch wheel is the CUDA build, so the first run
# downloads about 3 GB (torch and the nvidia-* libraries) and the
# environment takes about 6 GB; everything here runs on the CPU.
#
# Why these pins:
# - torch 2.15.0, transformers 5.25.0: what tests/fixtures/
#   gpt2_reference.json was computed with.
# - onnx 1.23.2, onnxruntime 1.32.0: the ONNX Runtime peer columns.
# - the nvidia-*, cuda-* and triton pins are the ones torch 2.15.0's own
#   metadata requires.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/target/py-torch"
py="$venv/bin/python"

pins=(
  torch==2.15.0
  transformers==5.25.0
  safetensors==0.8.0
  numpy==2.4.6
  onnx==1.23.2
  onnxruntime==1.32.0
  # transitive, pinned for reproducibility
  annotated-doc==0.0.7
  annotated-types==0.8.0
  anyio==4.16.0
  click==8.5.1
  cuda-bindings==13.5.0
  cuda-pathfinder==1.9.1
  cuda-toolkit==13.2.2
  filelock==4.3.2
  flatbuffers==25.12.19
  fsspec==2026.9.0
  h11==0.16.0
  hf-xet==1.8.0
  httpcore2==2.17.0
  httpx2==2.17.0
  huggingface_hub==2.4.0
  idna==3.20
  Jinja2==3.1.6
  kernels==0.19.1
  markdown-it-py==4.3.0
  MarkupSafe==3.0.4
  mdurl==0.1.2
  ml_dtypes==0.7.0
  mpmath==1.3.0
  networkx==3.6.1
  nvidia-cublas==13.4.1.3
  nvidia-cuda-cccl==13.3.5.0.6
  nvidia-cuda-cupti==13.2.86
  nvidia-cuda-nvrtc==13.2.86
  nvidia-cuda-runtime==13.2.86
  nvidia-cudnn-cu13==9.26.0.51
  nvidia-cufft==12.2.0.57
  nvidia-cufile==1.17.1.22
  nvidia-cusolver==12.2.0.11
  nvidia-cusparse==12.7.10.12
  nvidia-cusparselt-cu13==0.8.1
  nvidia-nccl-cu13==2.30.7
  nvidia-nvjitlink==13.5.37
  nvidia-nvshmem-cu13==3.7.2
  nvidia-nvtx==13.2.86
  packaging==26.4
  protobuf==7.36.2
  pydantic==2.14.4
  pydantic_core==2.50.5
  Pygments==2.21.0
  PyYAML==6.0.4
  regex==2026.12.2
  rich==15.0.0
  setuptools==84.2.1
  shellingham==1.5.4
  sympy==1.14.0
  tokenizers==0.23.3
  tomlkit==0.15.3
  tqdm==4.70.1
  triton==3.9.0
  truststore==0.10.5
  typer==0.29.2
  typing-inspection==0.4.5
  typing_extensions==4.16.0
)
# The stamp records exactly which pin list the environment was built from;
# a changed list rebuilds it instead of silently reusing a stale one.
want="$(printf '%s\n' "${pins[@]}" | grep -v '^#' | sort)"
stamp="$venv/.pins"

ready() { [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }

if ready; then
  echo "$py"
  exit 0
fi

# The benchmark scripts may ask for the environment at once; one builds it
# while the others wait, then all see the finished venv.
mkdir -p "$root/target"
exec 9>"$root/target/.py-torch.lock"
flock 9
if ! ready; then
  rm -rf "$venv"
  echo "creating $venv (about 3 GB to download)" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    $(printf '%s\n' "$want") >&2
  printf '%s\n' "$want" >"$stamp"
fi
echo "$py"
