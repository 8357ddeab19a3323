#!/usr/bin/env bash
# SmolLM2-135M-Instruct (Q4_1 GGUF) in tc against llama.cpp and candle on
# the same file, at 1 and 2 threads: prefill tokens/s for a 128-token prompt
# and decode tokens/s for 64 tokens after it, as median (min–max) over
# rounds, next to the decode ceiling that this machine's memory bandwidth
# allows.
#
#   scripts/llm-peer-bench.sh             # 5 rounds
#   ROUNDS=3 scripts/llm-peer-bench.sh
#   LLAMA_CPP_SRC=/path/to/llama.cpp scripts/llm-peer-bench.sh
#
# llama.cpp is built from the sdist of llama-cpp-python on PyPI (it vendors
# llama.cpp under vendor/llama.cpp): PyPI is the only registry here that
# carries its source. LLAMA_CPP_SRC names a llama.cpp source tree to build
# instead (used as it is, into build folders of its own). Builds, the CMake
# venv and the run's raw outputs live under target/peers/; a build already
# there is reused. A second llama.cpp build with AMX compiled out is made
# only if the CPU has amx_int8, since ggml has AMX kernels for Q4_1 and they
# change prefill speed.
#
# The sdist's ggml loads its AMX tile configuration through GCC's
# _tile_loadconfig, which in GCC 12 declares an 8-byte read of the 64-byte
# config: GCC drops the stores of the tile shapes as dead, the tiles stay
# unconfigured and the first tileloadd dies with SIGILL. The script patches
# that one call in the extracted sdist to an asm statement that reads the
# whole struct (benches/peers/llm_peer_table.py amx-tilecfg-fix), which
# changes nothing else; the table's header says so.
#
# candle: the standalone crate benches/peers/candle, binary smollm2
# (candle-transformers' quantized_llama from the same GGUF, CPU), on the
# prompt's token ids as tc's example prints them (--print-ids), so both run
# the same ids; one warm-up and ROUNDS timed rounds in one process per
# thread count. It is built with -C target-cpu=native, like the native
# llama.cpp build: candle 0.11 has no x86 SIMD kernel for Q4_1, and its
# portable dot product is vectorized by the compiler only for the target's
# own features (about 5x faster here than with the default x86-64 target).
# Its target dir is target/peers/candle-target-native, so the MiniLM build
# in target/peers/candle-target keeps its flags. The table also compares
# candle's greedy text with tc's.
#
# llama.cpp rows come from two of its tools: llama-bench (f16 KV cache only:
# this version's -ctk does not take f32) and llama-batched-bench, which does,
# so the f32 row matches tc's f32 cache; both tools also give an f16 row so
# the cache's effect is not confused with the tool's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

ROUNDS=${ROUNDS:-5}
LLAMA_CPP_PYTHON=${LLAMA_CPP_PYTHON:-0.3.36}
# Pinned so that a re-uploaded sdist is refused before it is built.
SDIST_SHA256=${SDIST_SHA256:-832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e}
# 2 cores are shared with other builds: more jobs only thrash.
JOBS=${JOBS:-2}
model=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
out=target/peers
run=$out/llm-run
# Exactly 128 tokens for SmolLM2's tokenizer (this GGUF adds no BOS; the ids
# are llama-tokenize's too); the example prints the count as its prefill
# count, and the table checks it. Greedy decoding of this text does not
# reach EOS within 64 tokens.
prompt="The history of the printing press begins in the middle of the fifteenth century, when Johannes Gutenberg, a goldsmith from Mainz, combined several older ideas into a single working machine. Movable type had been used in East Asia for centuries, and screw presses were already common in European vineyards, but Gutenberg found a way to cast metal letters quickly and in large numbers. His workshop printed indulgences, grammars and, most famously, a Latin Bible of about thirteen hundred pages. Within fifty years, presses were running in more than two hundred cities, and the price of books fell sharply, so that ordinary merchants and village teachers could own several books"

LLAMA_CPP_SRC=${LLAMA_CPP_SRC:-}

mkdir -p "$out"
bash scripts/fetch-smollm2.sh >/dev/null

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has_flag() { [[ " ${flags#*:} " == *" $1 "* ]]; }
amx=no
has_flag amx_int8 && amx=yes

# --- llama.cpp from source -------------------------------------------------
if [ -n "$LLAMA_CPP_SRC" ]; then
  src=$LLAMA_CPP_SRC
  [ -f "$src/CMakeLists.txt" ] || { echo "LLAMA_CPP_SRC=$src: no CMakeLists.txt" >&2; exit 1; }
  build_dir=$out/llama.cpp-src-build
  llama_src="source tree $src (as it is)"
else
  src=$out/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp
  build_dir=$out/llama.cpp-build
fi
if [ -z "$LLAMA_CPP_SRC" ] && [ ! -f "$src/CMakeLists.txt" ]; then
  dl=$out/llamacpp-dl
  mkdir -p "$dl"
  sdist=$dl/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz
  if [ ! -f "$sdist" ]; then
    # --no-binary on this one package only: with :all: pip also builds the
    # metadata step's own build requirements (cmake, ninja) from source,
    # which takes longer than llama.cpp itself.
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$dl"
  fi
  got=$(sha256sum "$sdist" | cut -d' ' -f1)
  if [ "$LLAMA_CPP_PYTHON" = 0.3.36 ] && [ "$got" != "$SDIST_SHA256" ]; then
    echo "sdist sha256 mismatch: got $got, want $SDIST_SHA256" >&2
    exit 1
  fi
  tar -xzf "$sdist" -C "$out"
fi
if [ -z "$LLAMA_CPP_SRC" ]; then
  mmq=$src/ggml/src/ggml-cpu/amx/mmq.cpp
  fix=absent
  [ -f "$mmq" ] && fix=$(python3 benches/peers/llm_peer_table.py amx-tilecfg-fix "$mmq")
  llama_src="vendored in llama-cpp-python $LLAMA_CPP_PYTHON (sdist)"
  case $fix in
  patched | "already patched") llama_src+=", AMX tile-config load patched (GCC 12 fix)" ;;
  *) llama_src+=", AMX tile-config load not patched ($fix)" ;;
  esac
fi

if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
  # Never a system-wide pip install: CMake and Ninja go into a venv of their own.
  [ -x "$out/venv/bin/cmake" ] && [ -x "$out/venv/bin/ninja" ] || {
    python3 -m venv "$out/venv"
    "$out/venv/bin/pip" install --quiet cmake ninja
  }
  export PATH=$root/$out/venv/bin:$PATH
fi

# Configures once; later runs only let ninja check that nothing changed.
# The server is built in the native (AMX) build only: serve-load.sh runs it.
build_llama() { # build-dir server(ON|OFF) [extra cmake args...]
  local dir=$1 server=$2
  shift 2
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S "$src" -B "$dir" -G Ninja -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER="$server" -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
      "$@" >"$dir.configure.log" 2>&1 ||
      { cat "$dir.configure.log" >&2; exit 1; }
  fi
  local targets=(llama-bench llama-batched-bench)
  # llama-server for scripts/serve-load.sh (LLAMA_SERVER=$dir/bin/llama-server);
  # its web UI is left out (its assets would be downloaded).
  if [ "$server" = ON ]; then
    cmake -S "$src" -B "$dir" -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF >>"$dir.configure.log" 2>&1
    targets+=(llama-server)
  fi
  local t0=$SECONDS
  cmake --build "$dir" --target "${targets[@]}" -j "$JOBS" >"$dir.build.log" 2>&1 ||
    { tail -40 "$dir.build.log" >&2; exit 1; }
  echo "llama.cpp build $dir: $((SECONDS - t0)) s" >&2
}
builds=(amx)
build_llama "$build_dir" ON
if [ "$amx" = yes ]; then
  # -mno-* wins over -march=native whatever the order, so ggml sees no
  # __AMX_INT8__ and compiles its AMX backend out. This build is also the
  # fallback where the AMX one cannot run (an unpatched source built with
  # GCC 12 dies with SIGILL in its AMX Q4_1 kernels, see above).
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  build_llama "$build_dir-noamx" OFF "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx"
  builds+=(noamx)
fi
bindir() { [ "$1" = amx ] && echo "$build_dir/bin" || echo "$build_dir-noamx/bin"; }

# --- tc ----------------------------------------------------------------------
cargo build --release --example smollm2
tc=target/release/examples/smollm2

# --- candle --------------------------------------------------------------------
candle=target/peers/candle-target-native/release/smollm2
t0=$SECONDS
RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=target/peers/candle-target-native \
  cargo build --release --manifest-path benches/peers/candle/Cargo.toml --bin smollm2 -j "$JOBS" ||
  { echo "note: benches/peers/candle did not build; no candle rows" >&2; candle=; }
echo "candle build: $((SECONDS - t0)) s" >&2

# --- memory bandwidth ---------------------------------------------------------
gcc -O3 -march=native -fopenmp benches/peers/membw.c -o "$out/membw"
weight_bytes=$(python3 benches/peers/llm_peer_table.py weight-bytes "$model")
# A buffer the size of the weights: on a CPU whose L3 holds them, decode can
# beat the DRAM ceiling, and this line says by how much at most.
cache_mib=$(( (weight_bytes + (1 << 20) - 1) >> 20 ))

rm -rf "$run"
mkdir -p "$run"
{
  for t in 1 2; do
    echo "dram $t $("$out/membw" 1024 "$t" 5 | cut -d' ' -f1)"
    echo "cache $t $("$out/membw" "$cache_mib" "$t" 10 | cut -d' ' -f1)"
  done
} >"$run/membw.txt"

shown=""
for f in avx512f avx512_vnni avx512_bf16 amx_int8 amx_bf16; do
  has_flag "$f" && shown+="$f " || shown+="no-$f "
done
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "ncpu=$(nproc)"
  echo "l3=$(lscpu 2>/dev/null | sed -n 's/^L3 cache: *//p' | head -1)"
  echo "flags=${shown% }"
  echo "amx=$amx"
  if [ "$amx" = yes ]; then
    gcc -O2 benches/peers/amxprobe.c -o "$out/amxprobe"
    echo "amx_probe=$("$out/amxprobe" || true)"
  fi
  echo "model=$model"
  echo "model_bytes=$(stat -c %s "$model")"
  echo "weight_bytes=$weight_bytes"
  echo "llama_src=$llama_src"
  echo "candle=$(sed -n '/^name = "candle-core"$/{n;s/^version = "\(.*\)"$/\1/p}' benches/peers/candle/Cargo.lock)"
  echo "membw_what=sum of u64s, 1 GiB buffer, best of 5"
  echo "membw_cache_what=same, $cache_mib MiB buffer, best of 10"
} >"$run/meta.txt"

# --- runs ----------------------------------------------------------------------
# One untimed run first so the GGUF is in the page cache for every process.
"$tc" --raw --max-tokens 1 "$prompt" >/dev/null 2>&1
# The prompt's token ids for candle, which gets no tokenizer run of its own.
ids=$("$tc" --raw --print-ids "$prompt" 2>/dev/null)
echo "$ids" >"$run/prompt-ids.txt"
for r in $(seq "$ROUNDS"); do
  for t in 1 2; do
    for numerics in fast exact; do
      RAYON_NUM_THREADS=$t "$tc" --raw --max-tokens 64 --numerics "$numerics" "$prompt" \
        >"$run/tc-$numerics-t$t-r$r.out" 2>"$run/tc-$numerics-t$t-r$r.log"
    done
  done
  echo "tc round $r/$ROUNDS done" >&2
done

# A failing llama.cpp run (this version's AMX kernels can raise SIGILL) is
# recorded next to its output and shown in the table, not fatal.
peer() { # output-file command...
  local f=$1 rc=0
  shift
  "$@" >"$f" 2>"$f.err" || rc=$?
  [ "$rc" = 0 ] || echo "$rc" >"$f.failed"
}
if [ -n "$candle" ]; then
  for t in 1 2; do
    peer "$run/candle-t$t.jsonl" env RAYON_NUM_THREADS="$t" "$candle" "$model" "$ids" "$ROUNDS" 64
  done
  echo "candle runs done" >&2
fi
for b in "${builds[@]}"; do
  bin=$(bindir "$b")
  peer "$run/llama-bench-$b-pp.json" \
    "$bin/llama-bench" -m "$model" -p 128 -n 0 -t 1,2 -r "$ROUNDS" -o json
  peer "$run/llama-bench-$b-tg.json" \
    "$bin/llama-bench" -m "$model" -p 0 -n 64 -d 128 -t 1,2 -r "$ROUNDS" -o json
  # A prompt length listed ROUNDS times: one pp128 + tg64 each, in one
  # process after the tool's own warm-up.
  npp=$(printf '128%.0s,' $(seq "$ROUNDS"))
  for kv in f16 f32; do
    for t in 1 2; do
      peer "$run/batched-$b-$kv-t$t.jsonl" \
        "$bin/llama-batched-bench" -m "$model" -c 192 -b 128 -ub 128 -npp "${npp%,}" \
        -ntg 64 -npl 1 -t "$t" -tb "$t" -ctk "$kv" -ctv "$kv" --output-format jsonl
    done
  done
  echo "llama.cpp $b runs done" >&2
done

echo
python3 benches/peers/llm_peer_table.py table "$run" | tee "$run/table.md"
