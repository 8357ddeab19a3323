//! Picking the next token from a row of logits: greedy, or temperature /
//! top-k / top-p sampling with a seeded, reproducible RNG.

/// How [`Sampler`] turns logits into a token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature. 0 (or anything not a positive finite number)
    /// means greedy decoding.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 turns the filter off.
    pub top_k: usize,
    /// Nucleus sampling: keep the smallest set of most likely tokens whose
    /// probabilities add up to at least `top_p`; 1.0 turns the filter off.
    pub top_p: f32,
    /// Seed of the RNG: a seed and a sequence of logits always give the same tokens.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// splitmix64: tiny, fast, and fully determined by the seed, which is all a
/// reproducible sampler needs (no cryptographic strength wanted).
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 53 bits so every value is exact in f64.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Chooses one token id per call from a row of logits.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: SplitMix64,
}

/// Index of the largest logit; the lowest index wins ties and NaN is never
/// chosen. Returns 0 when there is nothing to choose from (empty or all NaN),
/// so a broken row cannot panic the decode loop.
///
/// Two passes that vectorize: the largest value (sixteen running maxima,
/// each updated only by a greater value, so a NaN never enters), then the
/// first index holding it. A 16-row decode step's greedy choice over a
/// 49,152-entry vocabulary took a millisecond one comparison at a time.
fn argmax(logits: &[f32]) -> u32 {
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = logits.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let top = lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    // `==` also matches −0 for +0, as the first pass's `>` took them as
    // equal; −∞ is matched when every logit that is not NaN is −∞.
    logits
        .iter()
        .position(|&x| x == top)
        .map_or(0, |i| i as u32)
}

/// [`argmax`] one logit at a time: the definition the tests hold it to.
#[cfg(test)]
fn argmax_scalar(logits: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() {
            continue;
        }
        match best {
            Some((_, b)) if l <= b => {}
            _ => best = Some((i, l)),
        }
    }
    best.map_or(0, |(i, _)| i as u32)
}

impl Sampler {
    /// A sampler whose RNG starts from `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Self {
        Sampler {
            rng: SplitMix64(cfg.seed),
            cfg,
        }
    }

    /// The next token for this row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let t = self.cfg.temperature;
        if !(t > 0.0 && t.is_finite()) {
            return argmax(logits);
        }

        // Softmax is shift-invariant; subtracting the max keeps exp() in range
        // even for a temperature so small that logit / t would overflow.
        let max = logits
            .iter()
            .copied()
            .filter(|l| !l.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            // Every logit is -inf or NaN: no distribution to draw from.
            return argmax(logits);
        }
        let t = f64::from(t);
        let mut cands: Vec<(u32, f64)> = logits
            .iter()
            .enumerate()
            .filter_map(|(i, &l)| {
                let w = if max == f32::INFINITY {
                    // +inf dominates everything else; share the mass among them.
                    if l == f32::INFINITY {
                        1.0
                    } else {
                        0.0
                    }
                } else {
                    ((f64::from(l) - f64::from(max)) / t).exp()
                };
                // NaN logits, and tokens too unlikely to ever be drawn, drop out.
                (w > 0.0).then_some((i as u32, w))
            })
            .collect();
        if cands.is_empty() {
            return argmax(logits);
        }

        // Most likely first; equal weights keep index order so the result
        // does not depend on how the sort breaks ties.
        let by_weight = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = self.cfg.top_k;
        if k > 0 && k < cands.len() {
            // Partition first so a 50k-entry vocabulary is not sorted in full.
            cands.select_nth_unstable_by(k - 1, by_weight);
            cands.truncate(k);
        }
        cands.sort_unstable_by(by_weight);

        let total: f64 = cands.iter().map(|c| c.1).sum();
        let p = self.cfg.top_p;
        if p.is_nan() || p < 1.0 {
            // Nucleus over the (top-k renormalised) distribution; p <= 0 or
            // NaN still keeps the single most likely token.
            let target = if p > 0.0 { f64::from(p) * total } else { 0.0 };
            let mut acc = 0.0;
            let mut keep = cands.len();
            for (n, c) in cands.iter().enumerate() {
                acc += c.1;
                if acc >= target {
                    keep = n + 1;
                    break;
                }
            }
            cands.truncate(keep.max(1));
        }

        let total: f64 = cands.iter().map(|c| c.1).sum();
        let mut r = self.rng.next_f64() * total;
        for c in &cands {
            if r < c.1 {
                return c.0;
            }
            r -= c.1;
        }
        // Rounding can leave r just past the last weight; that token is the draw.
        cands.last().map_or_else(|| argmax(logits), |c| c.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplerConfig {
        SamplerConfig {
            temperature,
            top_k,
            top_p,
            seed,
        }
    }

    /// A fixed pseudo-random logits row, different per step.
    fn row(step: u64, n: usize) -> Vec<f32> {
        let mut g = SplitMix64(step.wrapping_mul(7919));
        (0..n).map(|_| (g.next_f64() * 8.0 - 4.0) as f32).collect()
    }

    /// The vectorized argmax is the scalar one on rows of every length
    /// (tails included) mixing NaNs, infinities, signed zeros and ties.
    #[test]
    fn argmax_is_the_scalar_definition() {
        let special = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
            3.5,
        ];
        let mut g = SplitMix64(20261207);
        for n in 0..200 {
            for _ in 0..20 {
                let l: Vec<f32> = (0..n)
                    .map(|_| match g.next_u64() % 4 {
                        0 => special[(g.next_u64() % special.len() as u64) as usize],
                        _ => (g.next_f64() * 8.0 - 4.0) as f32,
                    })
                    .collect();
                assert_eq!(argmax(&l), argmax_scalar(&l), "{l:?}");
            }
        }
        for all in [f32::NAN, f32::NEG_INFINITY, -0.0] {
            for n in [0, 1, 15, 16, 17, 40] {
                let l = vec![all; n];
                assert_eq!(argmax(&l), argmax_scalar(&l), "{n} × {all}");
            }
        }
    }

    #[test]
    fn greedy_takes_lowest_index_on_ties() {
        let mut s = Sampler::new(cfg(0.0, 0, 1.0, 1));
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(s.sample(&[5.0, 5.0]), 0);
        assert_eq!(s.sample(&[f32::NAN, 2.0, f32::NAN, 2.0]), 1);
        assert_eq!(s.sample(&[-1.0, f32::NAN, -0.5]), 2);
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::new(cfg(1.0, 1, 1.0, 42));
        for step in 0..50 {
            let l = row(step, 100);
            assert_eq!(s.sample(&l), argmax(&l));
        }
    }

    #[test]
    fn tiny_top_p_is_greedy() {
        for p in [1e-6, 0.0, -1.0, f32::NAN] {
            let mut s = Sampler::new(cfg(0.8, 0, p, 3));
            for step in 0..50 {
                let l = row(step, 100);
                assert_eq!(s.sample(&l), argmax(&l), "top_p {p}");
            }
        }
    }

    #[test]
    fn same_seed_same_sequence() {
        let run = |seed| {
            let mut s = Sampler::new(cfg(1.0, 40, 0.9, seed));
            (0..200)
                .map(|step| s.sample(&row(step, 500)))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn sampling_follows_the_distribution() {
        // Two tokens at p = 0.25 / 0.75 (logit gap ln 3): the draw frequency
        // must land near 0.75, which catches an inverted or biased draw.
        let l = [0.0, 3f32.ln()];
        let mut s = Sampler::new(cfg(1.0, 0, 1.0, 11));
        let ones = (0..20_000).filter(|_| s.sample(&l) == 1).count();
        let freq = ones as f64 / 20_000.0;
        assert!((freq - 0.75).abs() < 0.02, "freq {freq}");
    }

    #[test]
    fn top_p_cuts_the_tail() {
        // Probabilities 0.5 / 0.3 / 0.2: top_p 0.7 keeps exactly the first two.
        let l = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let mut s = Sampler::new(cfg(1.0, 0, 0.7, 5));
        let mut seen = [false; 3];
        for _ in 0..2_000 {
            seen[s.sample(&l) as usize] = true;
        }
        assert_eq!(seen, [true, true, false]);
    }

    #[test]
    fn near_zero_temperature_is_greedy() {
        for t in [0.0, -1.0, 1e-30, 1e-8, f32::MIN_POSITIVE, f32::NAN] {
            let mut s = Sampler::new(cfg(t, 0, 1.0, 9));
            for step in 0..20 {
                let l = row(step, 100);
                assert_eq!(s.sample(&l), argmax(&l), "temperature {t}");
            }
        }
    }

    #[test]
    fn degenerate_rows_do_not_panic() {
        let rows: [&[f32]; 6] = [
            &[],
            &[f32::NEG_INFINITY; 8],
            &[f32::NAN; 8],
            &[f32::NAN, f32::NEG_INFINITY, f32::NAN],
            &[f32::INFINITY, 1.0, f32::INFINITY, f32::NAN],
            &[f32::MAX, f32::MIN, 0.0],
        ];
        for t in [0.0, 0.7, 1e-30] {
            let mut s = Sampler::new(cfg(t, 2, 0.9, 1));
            for r in rows {
                let id = s.sample(r) as usize;
                assert!((r.is_empty() && id == 0) || id < r.len());
                if let Some(l) = r.get(id) {
                    assert!(!l.is_nan() || r.iter().all(|x| x.is_nan()));
                }
            }
        }
        // +inf ties share the mass: only those two indices may come out.
        let mut s = Sampler::new(cfg(1.0, 0, 1.0, 2));
        for _ in 0..100 {
            let id = s.sample(&[f32::INFINITY, 1.0, f32::INFINITY, f32::NAN]);
            assert!(id == 0 || id == 2);
        }
    }
}
