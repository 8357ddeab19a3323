#!/usr/bin/env bash
# tc-serve against the real OpenAI Python client (PyPI `openai`): starts the
# server on a free loopback port with SmolLM2-135M-Instruct and runs
# scripts/openai_client_test.py against it (chat and completions, streamed
# and not, stop, max_tokens, seed reproducibility, errors; greedy output
# equal to the smollm2 example's when TC_EXPECT_GREEDY names its JSON).
#
#   scripts/openai-client-test.sh            # builds the release server
#   TC_SERVE_BIN=path/to/tc-serve scripts/openai-client-test.sh
#
# The client lives in a virtual environment under target/py-openai, every
# package pinned (transitive ones too); nothing is installed system-wide.
# tc-serve's test `openai_client` (cargo test -p tc-serve) runs this script.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/target/py-openai"
py="$venv/bin/python"

pins=(
  openai==3.51.0
  # transitive, pinned for reproducibility
  annotated_types==0.8.0
  anyio==4.16.0
  h11==0.16.0
  httpcore2==2.17.0
  httpx2==2.17.0
  idna==3.20
  jiter==0.19.0
  pydantic==2.14.4
  pydantic_core==2.50.5
  sniffio==1.3.1
  truststore==0.10.5
  typing_extensions==4.16.0
  typing_inspection==0.4.5
)
want="$(printf '%s\n' "${pins[@]}" | grep -v '^#' | sort)"
stamp="$venv/.pins"
ready() { [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }

mkdir -p "$root/target"
if ! ready; then
  # One process builds the environment while the others wait.
  exec 9>"$root/target/.py-openai.lock"
  flock 9
  if ! ready; then
    rm -rf "$venv"
    echo "creating $venv" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check $want >&2
    printf '%s\n' "$want" >"$stamp"
  fi
  flock -u 9
fi

model="$root/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || bash "$root/scripts/fetch-smollm2.sh" >&2

bin="${TC_SERVE_BIN:-}"
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release -p tc-serve >&2)
  bin="$root/target/release/tc-serve"
fi

log="$(mktemp)"
"$bin" --host 127.0.0.1 --port 0 --model "$model" 2>"$log" &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT
addr=""
for _ in $(seq 1 600); do
  addr="$(grep -o 'listening on http://[0-9.:]*' "$log" | head -n1 | sed 's|listening on http://||' || true)"
  [ -n "$addr" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; echo "tc-serve exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { cat "$log" >&2; echo "tc-serve did not start" >&2; exit 1; }
echo "tc-serve on $addr" >&2
"$py" "$root/scripts/openai_client_test.py" "http://$addr/v1"
