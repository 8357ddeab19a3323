//! Shared helpers: a small deterministic RNG and random valid blocks.
#![allow(dead_code)]

use half::f16;
use tc_quant::Format;

/// SplitMix64: deterministic, dependency-free.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Byte offsets of the f16 scales inside one block.
pub fn f16_fields(f: Format) -> &'static [usize] {
    match f {
        Format::Q8_0 | Format::Q4_0 => &[0],
        Format::Q4_1 | Format::Q4_K => &[0, 2],
        Format::Q6_K => &[208],
    }
}

/// `n` random blocks whose f16 scales are finite and modest, so products
/// stay in range; the quantized payload is arbitrary bytes.
pub fn random_blocks(rng: &mut Rng, f: Format, n: usize) -> Vec<u8> {
    let mut b = rng.bytes(n * f.block_bytes());
    for blk in b.chunks_exact_mut(f.block_bytes()) {
        for &at in f16_fields(f) {
            let v = f16::from_f32(rng.unit() / 16.0).to_bits().to_le_bytes();
            blk[at..at + 2].copy_from_slice(&v);
        }
    }
    b
}

/// Activations with a spread of magnitudes (some blocks tiny, some large).
pub fn random_acts(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(n);
    while x.len() < n {
        let scale = [0.01f32, 1.0, 30.0][(rng.next() % 3) as usize];
        for _ in 0..32.min(n - x.len()) {
            x.push(rng.unit() * scale);
        }
    }
    x
}

/// Like [`random_blocks`] but with f16 scales drawn from extreme ranges
/// too: f16 subnormals (~2⁻²⁰), modest ones, and large ones (~100), with
/// either sign (Q4_1 and Q4_K minimums negative as real models have them).
pub fn extreme_blocks(rng: &mut Rng, f: Format, n: usize) -> Vec<u8> {
    let mut b = rng.bytes(n * f.block_bytes());
    for blk in b.chunks_exact_mut(f.block_bytes()) {
        for &at in f16_fields(f) {
            let mag = [1.0 / 16.0, 1.0 / (1u32 << 20) as f32, 100.0][(rng.next() % 3) as usize];
            let v = f16::from_f32(rng.unit() * mag).to_bits().to_le_bytes();
            blk[at..at + 2].copy_from_slice(&v);
        }
    }
    b
}

/// Standard normal (Box–Muller).
pub fn normal(rng: &mut Rng) -> f32 {
    let u1 = ((rng.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let u2 = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Activations built to break 8-bit activation quantization: per 32-block
/// one of N(0, 1) values, an all-zero block, mostly exact zeros, N(0, 1)
/// with one ×50..×300 outlier, all values ±max (ties of `x / d`), huge
/// (~1e28), tiny but normal (~1e-30), and tiny enough that the block
/// scale `max|x| / 127` is a subnormal f32 (~1e-43..1e-37). About one
/// row of `row_len` in four is subnormal-scale throughout, so its errors
/// are not hidden under larger blocks' terms.
pub fn adversarial_acts(rng: &mut Rng, n: usize, row_len: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(n);
    let mut tiny_row = false;
    while x.len() < n {
        if x.len() % row_len.max(1) == 0 {
            tiny_row = rng.next().is_multiple_of(4);
        }
        let len = 32.min(n - x.len());
        let kind = if tiny_row { 7 } else { rng.next() % 8 };
        let scale = match kind {
            5 => 1e28,
            6 => 1e-30,
            // 127 ulps of the smallest subnormal upward, log-spread: the
            // fewer ulps in `d`, the further `x / d` can overshoot 127.
            7 => f32::from_bits(127 + (rng.next() % (1 << (rng.next() % 17))) as u32),
            _ => 1.0,
        };
        let mut blk: Vec<f32> = (0..len)
            .map(|_| match kind {
                1 => 0.0,
                2 if !rng.next().is_multiple_of(4) => 0.0,
                4 => [-1.0, 1.0][(rng.next() % 2) as usize],
                7 => rng.unit() * scale,
                _ => normal(rng) * scale,
            })
            .collect();
        if kind == 3 {
            let at = (rng.next() % len as u64) as usize;
            blk[at] *= 50.0 + 250.0 * (rng.unit() + 1.0) / 2.0;
            blk[at] += blk[at].signum() * 50.0;
        }
        if kind == 7 {
            // Make the block's max the most negative value, the case where
            // an unclamped subnormal scale saturated to −128.
            blk[0] = -scale;
        }
        x.extend(blk);
    }
    x
}
