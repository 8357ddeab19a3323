//! Deterministic GPT-2-small test weights, made without PyTorch: a seeded
//! generator writes `model.safetensors` in transformers' GPT-2 layout
//! (`wte.weight`, `h.N.attn.c_attn.weight`, …, the names and shapes
//! `examples/gpt2_decode.rs`'s `load` reads), initialised as transformers
//! initialises `GPT2LMHeadModel(GPT2Config())`:
//! - linear (Conv1D) and embedding weights: normal, std 0.02;
//! - the two residual projections (`attn.c_proj`, `mlp.c_proj`): normal,
//!   std 0.02 / √(2 · 12) (GPT-2's scaled residual init);
//! - biases zero; LayerNorm gains one, shifts zero.
//!
//! The normals are Box–Muller over a SplitMix64 stream. Each tensor is cut
//! into fixed chunks, each with a stream seeded from (seed, tensor name,
//! chunk index), so the bytes depend on neither the thread count nor the
//! order tensors are written in; `libm` (a pure-Rust libm) does the
//! transcendentals, so they depend on no platform's libm either.
//!
//! `tests/gpt2_decode.rs` calls [`write`] into `target/`;
//! `scripts/gpt2-reference.py` reads the same file into transformers to make
//! the test's fixture; the benches' copy in `models/gpt2-seed0` comes from
//!
//!     cargo run --release --example gpt2_weights -- [OUT_DIR] [--seed N]
//!
//! (`OUT_DIR` defaults to `models/gpt2-seed0`, the seed to 0).
#![allow(dead_code)]

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, View};

/// GPT-2-small: vocabulary, context, width, MLP width, layers.
pub const VOCAB: usize = 50257;
pub const CONTEXT: usize = 1024;
pub const D: usize = 768;
pub const F: usize = 3072;
pub const LAYERS: usize = 12;

/// transformers' `initializer_range`.
const STD: f64 = 0.02;

/// Elements per independently seeded stream.
const CHUNK: usize = 1 << 16;

/// What a tensor holds.
#[derive(Clone, Copy)]
enum Init {
    Normal(f64),
    Zeros,
    Ones,
}

/// One tensor, generated when the writer asks for its bytes.
struct Lazy {
    name: String,
    shape: Vec<usize>,
    init: Init,
    seed: u64,
    /// The tensor's part of [`Written::fingerprint`], set once written.
    sum: Cell<Option<u64>>,
}

/// The file written and a fingerprint of its contents: over the tensors in
/// name order, `h = h · 0x100000001b3 + Σᵢ bitsᵢ · (2i + 1)` (wrapping u64,
/// `bitsᵢ` the f32 bit pattern of element i). Any single changed element
/// changes it; `scripts/gpt2-reference.py` computes the same from the file
/// and records it in the fixture.
pub struct Written {
    pub path: PathBuf,
    pub fingerprint: u64,
}

/// The tensor names, shapes and inits of GPT-2-small.
fn tensors(seed: u64) -> Vec<Lazy> {
    let mut out = Vec::new();
    let mut add = |name: String, shape: &[usize], init: Init| {
        out.push(Lazy {
            name,
            shape: shape.to_vec(),
            init,
            seed,
            sum: Cell::new(None),
        })
    };
    let proj = Init::Normal(STD / (2.0 * LAYERS as f64).sqrt());
    add("wte.weight".into(), &[VOCAB, D], Init::Normal(STD));
    add("wpe.weight".into(), &[CONTEXT, D], Init::Normal(STD));
    for l in 0..LAYERS {
        let p = |s: &str| format!("h.{l}.{s}");
        add(p("ln_1.weight"), &[D], Init::Ones);
        add(p("ln_1.bias"), &[D], Init::Zeros);
        add(p("attn.c_attn.weight"), &[D, 3 * D], Init::Normal(STD));
        add(p("attn.c_attn.bias"), &[3 * D], Init::Zeros);
        add(p("attn.c_proj.weight"), &[D, D], proj);
        add(p("attn.c_proj.bias"), &[D], Init::Zeros);
        add(p("ln_2.weight"), &[D], Init::Ones);
        add(p("ln_2.bias"), &[D], Init::Zeros);
        add(p("mlp.c_fc.weight"), &[D, F], Init::Normal(STD));
        add(p("mlp.c_fc.bias"), &[F], Init::Zeros);
        add(p("mlp.c_proj.weight"), &[F, D], proj);
        add(p("mlp.c_proj.bias"), &[D], Init::Zeros);
    }
    add("ln_f.weight".into(), &[D], Init::Ones);
    add("ln_f.bias".into(), &[D], Init::Zeros);
    out
}

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a of the tensor's name: its stream differs from every other's.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `out.len()` normals of standard deviation `std`, from the stream of
/// (seed, name, chunk).
fn fill_normal(out: &mut [f32], std: f64, seed: u64, name: u64, chunk: u64) {
    let mut state = mix(mix(seed ^ name).wrapping_add(chunk));
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(state)
    };
    for pair in out.chunks_mut(2) {
        // u1 in (0, 1] so its log is finite; u2 in [0, 1).
        let u1 = ((next() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
        let u2 = (next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        let r = libm::sqrt(-2.0 * libm::log(u1)) * std;
        let theta = 2.0 * std::f64::consts::PI * u2;
        pair[0] = (r * libm::cos(theta)) as f32;
        if let Some(second) = pair.get_mut(1) {
            *second = (r * libm::sin(theta)) as f32;
        }
    }
}

impl Lazy {
    fn len(&self) -> usize {
        self.shape.iter().product()
    }

    fn values(&self) -> Vec<f32> {
        let n = self.len();
        match self.init {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Normal(std) => {
                let mut v = vec![0.0f32; n];
                let name = name_hash(&self.name);
                let chunks: Vec<(usize, &mut [f32])> = v.chunks_mut(CHUNK).enumerate().collect();
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
                let per = chunks.len().div_ceil(threads).max(1);
                let (mut chunks, seed) = (chunks, self.seed);
                std::thread::scope(|s| {
                    while !chunks.is_empty() {
                        let rest = chunks.split_off(per.min(chunks.len()));
                        let mine = std::mem::replace(&mut chunks, rest);
                        s.spawn(move || {
                            for (i, c) in mine {
                                fill_normal(c, std, seed, name, i as u64);
                            }
                        });
                    }
                });
                v
            }
        }
    }
}

impl View for &Lazy {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        let v = self.values();
        let mut sum = 0u64;
        let mut bytes = Vec::with_capacity(v.len() * 4);
        for (i, x) in v.iter().enumerate() {
            sum = sum.wrapping_add((x.to_bits() as u64).wrapping_mul(2 * i as u64 + 1));
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        self.sum.set(Some(sum));
        Cow::Owned(bytes)
    }
    fn data_len(&self) -> usize {
        self.len() * 4
    }
}

/// Writes `dir/model.safetensors` (through a temporary file and a rename,
/// so a reader never sees half a file) and returns its fingerprint.
pub fn write(dir: &Path, seed: u64) -> Result<Written, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("model.safetensors");
    let tmp = dir.join(format!("model.safetensors.{}.tmp", std::process::id()));
    let ts = tensors(seed);
    // One key only: the header is serialised from a HashMap, whose order
    // would vary between runs with more, and the file is to be the same
    // bytes every time.
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(ts.iter().map(|t| (t.name.as_str(), t)), &Some(meta), &tmp)?;
    std::fs::rename(&tmp, &path)?;
    let mut by_name: Vec<&Lazy> = ts.iter().collect();
    by_name.sort_by(|a, b| a.name.cmp(&b.name));
    let fingerprint = by_name.iter().fold(0u64, |h, t| {
        h.wrapping_mul(0x0000_0100_0000_01b3)
            .wrapping_add(t.sum.get().expect("every tensor was written"))
    });
    Ok(Written { path, fingerprint })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seed: u64 = match args.iter().position(|a| a == "--seed") {
        Some(i) => args.get(i + 1).ok_or("--seed N")?.parse()?,
        None => 0,
    };
    let dir = args
        .iter()
        .enumerate()
        .find(|&(i, a)| !a.starts_with("--") && (i == 0 || args[i - 1] != "--seed"))
        .map_or_else(
            || PathBuf::from("models/gpt2-seed0"),
            |(_, a)| PathBuf::from(a),
        );
    let t0 = std::time::Instant::now();
    let w = write(&dir, seed)?;
    println!(
        "{} (seed {seed}, fingerprint {:016x}) in {:.1} s",
        w.path.display(),
        w.fingerprint,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
