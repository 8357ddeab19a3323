#!/usr/bin/env bash
# Create (once) the Python virtual environment that the reference scripts
# (scripts/quant-reference.py, scripts/smollm2-reference.py) run in, and
# print its interpreter's path on stdout, so that callers can write
#     "$(scripts/py-ref-env.sh)" scripts/smollm2-reference.py
# Everything else this script says goes to stderr.
#
# The environment lives in the git-ignored target/py-ref and never touches
# the system Python. Every package is pinned, transitive ones included, so
# that regenerating a fixture on another machine resolves the same code.
#
# Why these pins:
# - transformers 4.57.6: the last 4.x. 5.x imports torch as soon as it
#   reads GGUF metadata, and this project installs no torch; 4.57.6 only
#   gates on torch, which the reference script sidesteps for the
#   tokenizer-only load (see smollm2-reference.py).
# - tokenizers 0.22.2 and huggingface_hub 0.36.2: what transformers 4.57.6
#   requires (tokenizers < 0.23, huggingface_hub < 1.0).
# - gguf 0.19.0: llama.cpp's own gguf-py; its dequantizers are the
#   reference that tc's are checked against.
# - no sentencepiece: SmolLM2's tokenizer is byte-level BPE ("gpt2" in the
#   GGUF), which transformers converts with tokenizers alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/target/py-ref"
py="$venv/bin/python"

pins=(
  numpy==2.4.6
  gguf==0.19.0
  transformers==4.57.6
  tokenizers==0.22.2
  jinja2==3.1.6
  # transitive, pinned for reproducibility
  MarkupSafe==3.0.4
  huggingface_hub==0.36.2
  hf-xet==1.8.0
  safetensors==0.8.0
  regex==2026.12.2
  PyYAML==6.0.4
  tqdm==4.70.1
  packaging==26.4
  filelock==4.3.2
  fsspec==2026.9.0
  requests==2.34.2
  certifi==2026.10.19.post1
  charset-normalizer==3.5.3
  idna==3.20
  urllib3==2.8.0
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

# Several scripts (or test processes) may ask for the environment at once;
# one builds it while the others wait, then all see the finished venv.
mkdir -p "$root/target"
exec 9>"$root/target/.py-ref.lock"
flock 9
if ! ready; then
  rm -rf "$venv"
  echo "creating $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    $(printf '%s\n' "$want") >&2
  printf '%s\n' "$want" >"$stamp"
fi
echo "$py"
