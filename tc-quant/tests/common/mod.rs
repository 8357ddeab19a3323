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
