//! Fused scaled-dot-product attention on the host: `softmax(q·k·scale +
//! mask)·v` for every leading index, without the scores ever leaving a
//! small per-thread scratch.
//!
//! Why a kernel of its own: as separate steps a decoder's attention is a
//! product, three elementwise passes, a reduction and a second product,
//! each a call with its own overhead and its own trip through memory, at
//! shapes (3 query rows, 64-wide heads) where the overhead is most of the
//! time.
//!
//! Numerics: fixed bit for bit by the definition on [`run`], whatever path
//! runs. With AVX-512F/BW/VL (x86-64, found at run time) both products are
//! register tiles of up to 4 query rows × 4 vectors of 16 columns,
//! each lane one element's chain in the definition's order; the softmax's
//! elementwise steps are vectorized, and each row's sum stays sequential
//! (sixteen rows' sums in the lanes of one vector). Elsewhere
//! [`run_scalar`]'s plain loops compute the same operations in the same
//! order. The tests hold both to [`reference()`].

use std::cell::RefCell;
use std::ops::Range;

use tc_runtime::cast::{bf16_to_f32, f16_to_f32, CANONICAL_NAN};

use crate::options::fast_exp::{
    C1 as EXP_C1, C2 as EXP_C2, HI as EXP_HI, LO as EXP_LO, P as EXP_P,
};

/// How the products and the exponential round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numerics {
    /// Products accumulate through fused multiply-adds (one rounding per
    /// term) instead of a rounded product then a rounded add.
    pub fma: bool,
    /// `exp` is [`exp_fast`] (the JIT's polynomial) instead of std's f64
    /// `exp` rounded to f32.
    pub fast_exp: bool,
}

/// An operand's element type: f32, or, for the keys and values alone, a
/// 16-bit float that every f32 holds exactly (a KV cache kept in f16 or
/// bf16), widened as it is read, so the definition's operations run on
/// the widened values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// f32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl Elem {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F16 | Elem::Bf16 => 2,
        }
    }

    /// A 16-bit element's bits widened (f32 has no 16-bit form: 0).
    #[cfg(test)]
    fn widen(self, bits: u16) -> f32 {
        match self {
            Elem::F16 => f16_to_f32(bits),
            Elem::Bf16 => bf16_to_f32(bits),
            Elem::F32 => 0.0,
        }
    }

    /// Element `i` of the buffer at `p`, widened to f32 (exactly).
    ///
    /// # Safety
    /// Element `i` is readable and of this type.
    // SAFETY: (contract) met by each caller's bounds.
    unsafe fn read(self, p: *const u8, i: usize) -> f32 {
        // SAFETY: element `i` is readable (the contract).
        unsafe {
            match self {
                Elem::F32 => p.cast::<f32>().add(i).read_unaligned(),
                Elem::F16 => f16_to_f32(p.cast::<u16>().add(i).read_unaligned()),
                Elem::Bf16 => bf16_to_f32(p.cast::<u16>().add(i).read_unaligned()),
            }
        }
    }
}

/// One operand: its first element, its element type and its element
/// strides, one per axis of `lead ++ [2 matrix axes]`, all ≥ 0 (0
/// broadcasts the axis).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    /// The element at index 0 on every axis.
    pub ptr: *const u8,
    /// Its elements' type ([`Elem::F32`] for the queries and the mask).
    pub elem: Elem,
    /// Element strides, `lead.len() + 2` of them.
    pub strides: &'a [isize],
}

/// One attention call: for each leading index, q `[m, d]`, k `[d, t]`
/// (already transposed), v `[t, e]`, mask `[m, t]`, output `[m, e]`.
#[derive(Clone, Copy, Debug)]
pub struct Problem<'a> {
    /// The leading axes (any rank, product L).
    pub lead: &'a [usize],
    /// Query rows.
    pub m: usize,
    /// Head width of q and k.
    pub d: usize,
    /// Keys (scores per query row), ≥ 1.
    pub t: usize,
    /// Head width of v and the output.
    pub e: usize,
    /// The queries.
    pub q: Operand<'a>,
    /// The keys, transposed.
    pub k: Operand<'a>,
    /// The values.
    pub v: Operand<'a>,
    /// The additive mask.
    pub mask: Operand<'a>,
    /// The scores' factor.
    pub scale: f32,
    /// How the kernel rounds.
    pub numerics: Numerics,
}

/// Writes `out[(l·m + i)·e + c]` (the output is contiguous row-major
/// `lead ++ [m, e]`) for every flat leading index `l` in `range` (row-major
/// order of `lead`), nothing else. For each `l` and query row `i`:
///
/// 1. `s_j` = Σ over `d` in increasing order from `0.0` of `q[i,d]·k[d,j]`,
///    each term `fma(q, k, acc)` (`numerics.fma`) or `acc + (q·k rounded)`;
/// 2. `x_j = (s_j·scale) + mask[i,j]`, two roundings;
/// 3. `mx = max_j x_j`;
/// 4. `e_j = exp(x_j − mx)`, the difference rounded ([`exp_fast`] or std's);
/// 5. `sum` = `e_0 + e_1 + …` added in order from `0.0`;
/// 6. `p_j = e_j / sum`;
/// 7. `out[i,c]` = Σ over `j` in increasing order from `0.0` of
///    `p_j·v[j,c]`, rounded as in step 1; a NaN sum is
///    [`CANONICAL_NAN`], as the interpreter's matmul makes it.
///
/// These are the operations of the composition the op replaces
/// (docs/syntax.md §12f), so without FMA and with std's `exp` the result
/// is the interpreter's bit for bit. Panics if a stride is negative or
/// there are not `lead.len() + 2` of them, if `t == 0`, or if `range` is
/// non-empty and ends past L.
///
/// # Safety
/// Every element each operand addresses for these shapes lies in a live
/// allocation of f32; `out` is valid for writes of L·m·e f32s and overlaps
/// no operand.
// SAFETY: (contract) passed on whole to the path that runs.
pub unsafe fn run(p: &Problem<'_>, out: *mut f32, range: Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: AVX-512F/BW/VL are available (just checked); the rest is this
        // fn's contract.
        unsafe { x86::run(p, out, range) };
        return;
    }
    // SAFETY: this fn's contract.
    unsafe { run_scalar(p, out, range) }
}

thread_local! {
    /// This thread's scratch (copied operands, a row block's scores), kept
    /// across calls: a decoder calls once per sequence and layer, and an
    /// allocation per call would cost as much as a short head's work.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Grows `buf` to at least `n` floats; it never shrinks.
fn grow(buf: &mut Vec<f32>, n: usize) {
    if buf.len() < n {
        buf.resize(n, 0.0);
    }
}

/// Checks what the contract lets be checked cheaply; returns L.
fn check(p: &Problem<'_>, range: &Range<usize>) -> usize {
    let rank = p.lead.len() + 2;
    for op in [&p.q, &p.k, &p.v, &p.mask] {
        assert!(
            op.strides.len() == rank && op.strides.iter().all(|&s| s >= 0),
            "attention: every operand needs {rank} strides, all ≥ 0"
        );
    }
    let total = p.lead.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
    let total = total.expect("attention: the leading size overflows");
    assert!(p.t >= 1, "attention: t must be ≥ 1");
    assert!(
        p.q.elem == Elem::F32 && p.mask.elem == Elem::F32,
        "attention: the queries and the mask are f32"
    );
    assert!(
        range.is_empty() || range.end <= total,
        "attention: range past L"
    );
    total
}

/// One operand at one leading index: element `(a, b)` at `ptr + a·rs +
/// b·cs`. Pointers are formed with wrapping arithmetic, so only reading
/// an element needs the contract.
#[derive(Clone, Copy)]
struct Mat {
    ptr: *const f32,
    rs: usize,
    cs: usize,
}

impl Mat {
    /// The matrix from row `a` on.
    fn row(self, a: usize) -> Mat {
        Mat {
            ptr: self.ptr.wrapping_add(a * self.rs),
            ..self
        }
    }

    /// Element `(a, b)`.
    ///
    /// # Safety
    /// `(a, b)` is an element of the operand, readable.
    // SAFETY: (contract) met by each caller's loop bounds.
    unsafe fn get(self, a: usize, b: usize) -> f32 {
        // SAFETY: an element of the operand (the contract).
        unsafe { *self.ptr.add(a * self.rs + b * self.cs) }
    }
}

/// One operand at one leading index, of any [`Elem`]: element `(a, b)`
/// at element offset `a·rs + b·cs` from `ptr`.
#[derive(Clone, Copy)]
struct Src {
    ptr: *const u8,
    elem: Elem,
    rs: usize,
    cs: usize,
}

impl Src {
    /// The f32 matrix it is (`check` made the queries and the mask f32;
    /// the keys and values are read through here only when they are).
    fn mat(self) -> Mat {
        Mat {
            ptr: self.ptr.cast::<f32>(),
            rs: self.rs,
            cs: self.cs,
        }
    }

    /// Element `(a, b)`, widened.
    ///
    /// # Safety
    /// `(a, b)` is an element of the operand, readable.
    // SAFETY: (contract) met by each caller's loop bounds.
    unsafe fn get(self, a: usize, b: usize) -> f32 {
        // SAFETY: an element of the operand (the contract).
        unsafe { self.elem.read(self.ptr, a * self.rs + b * self.cs) }
    }
}

impl Operand<'_> {
    /// This operand at flat leading index `l < L` (so no leading size is 0)
    /// of `lead`; strides checked (`check`).
    fn at(&self, lead: &[usize], l: usize) -> Src {
        let n = lead.len();
        let (mut rest, mut off) = (l, 0usize);
        for (&size, &s) in lead.iter().zip(self.strides).rev() {
            off += rest % size * s as usize;
            rest /= size;
        }
        Src {
            ptr: self.ptr.wrapping_add(off * self.elem.bytes()),
            elem: self.elem,
            rs: self.strides[n] as usize,
            cs: self.strides[n + 1] as usize,
        }
    }
}

/// A rounding of step 1 or 7 per [`Numerics::fma`].
fn madd(fma: bool, a: f32, b: f32, acc: f32) -> f32 {
    if fma {
        a.mul_add(b, acc)
    } else {
        acc + a * b
    }
}

/// `exp` with `numerics.fast_exp` off: std's, in f64, rounded once.
fn exp_std(x: f32) -> f32 {
    (x as f64).exp() as f32
}

/// Step 4's `exp` per `fast`.
fn exp(fast: bool, x: f32) -> f32 {
    if fast {
        exp_fast(x)
    } else {
        exp_std(x)
    }
}

/// `2^n` for `n` in `[-126, 127]`, from its exponent field.
fn pow2(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// Cephes `expf`, the JIT's fast `exp` (`codegen::math`'s `fast_exp`)
/// operation for operation, so a kernel and a compiled program agree:
/// within 2.4e-7 relative for normal results, 0 below −104, +∞ above
/// 88.72283, NaN kept.
pub fn exp_fast(x: f32) -> f32 {
    // A NaN x goes through as NaN (the JIT's `minnum` makes it `hi`); the
    // result is x either way.
    let xc = x.clamp(EXP_LO, EXP_HI);
    let n = (xc * std::f32::consts::LOG2_E).round_ties_even();
    let r = (xc - n * EXP_C1) - n * EXP_C2;
    let mut p = EXP_P[0];
    for &c in &EXP_P[1..] {
        p = p.mul_add(r, c);
    }
    let s = p * (r * r) + r + 1.0;
    // n in [-150, 128]: two factors 2^n1 · 2^n2 that neither overflow the
    // exponent field, so a subnormal result rounds once.
    let ni = n as i32;
    let n1 = ni >> 1;
    let y = s * pow2(n1) * pow2(ni - n1);
    if x.is_nan() {
        x
    } else if x > EXP_HI {
        f32::INFINITY
    } else if x < EXP_LO {
        0.0
    } else {
        y
    }
}

/// Steps 2–6 on one row, scores in, probabilities out, scalar.
///
/// # Safety
/// `mask` addresses a readable mask row of `row.len()` elements.
// SAFETY: (contract) met by `run_scalar`.
unsafe fn softmax_scalar(mask: Mat, scale: f32, fast: bool, row: &mut [f32]) {
    for (j, x) in row.iter_mut().enumerate() {
        // SAFETY: `j < t` of the mask row (the contract).
        *x = *x * scale + unsafe { mask.get(0, j) };
    }
    let mx = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    for x in row.iter_mut() {
        *x = exp(fast, *x - mx);
    }
    let sum = row.iter().fold(0.0f32, |a, &b| a + b);
    for x in row.iter_mut() {
        *x /= sum;
    }
}

/// [`run`] on the portable path alone: what hosts without AVX-512F/BW/VL run,
/// and what the tests hold the vector path to.
///
/// # Safety
/// As [`run`].
// SAFETY: (contract) [`run`]'s, met by its callers.
pub unsafe fn run_scalar(p: &Problem<'_>, out: *mut f32, range: Range<usize>) {
    check(p, &range);
    if p.m == 0 || p.e == 0 {
        return;
    }
    let fma = p.numerics.fma;
    SCRATCH.with_borrow_mut(|buf| {
        grow(buf, p.t);
        let row = &mut buf[..p.t];
        for l in range.clone() {
            let [q, k, v, mask] = [p.q, p.k, p.v, p.mask].map(|o| o.at(p.lead, l));
            for i in 0..p.m {
                for (j, s) in row.iter_mut().enumerate() {
                    let mut acc = 0.0f32;
                    for dd in 0..p.d {
                        // SAFETY: `i < m`, `dd < d`, `j < t` at `l < L`.
                        acc = madd(fma, unsafe { q.get(i, dd) }, unsafe { k.get(dd, j) }, acc);
                    }
                    *s = acc;
                }
                // SAFETY: mask row `i < m` at `l < L`.
                unsafe { softmax_scalar(mask.mat().row(i), p.scale, p.numerics.fast_exp, row) };
                for c in 0..p.e {
                    let mut acc = 0.0f32;
                    for (j, &pj) in row.iter().enumerate() {
                        // SAFETY: `j < t`, `c < e` at `l < L`.
                        acc = madd(fma, pj, unsafe { v.get(j, c) }, acc);
                    }
                    let acc = if acc.is_nan() { CANONICAL_NAN } else { acc };
                    // SAFETY: `(l·m + i)·e + c < L·m·e` (the contract).
                    unsafe { *out.add((l * p.m + i) * p.e + c) = acc };
                }
            }
        }
    });
}

/// Steps 1–7 as literally as they read, over any strides: the tests'
/// oracle. `data` holds q's, k's, v's and the mask's elements, read at
/// `p`'s strides (its pointers are not used). Returns the whole output
/// (L·m·e); panics where `data` lacks an element the strides address.
pub fn reference(p: &Problem<'_>, data: [&[f32]; 4]) -> Vec<f32> {
    let (m, d, t, e, fma) = (p.m, p.d, p.t, p.e, p.numerics.fma);
    let rank = p.lead.len();
    let total: usize = p.lead.iter().product();
    let mut out = vec![0.0f32; total * m * e];
    for l in 0..total {
        let mut idx = vec![0usize; rank];
        let mut rest = l;
        for ax in (0..rank).rev() {
            idx[ax] = rest % p.lead[ax];
            rest /= p.lead[ax];
        }
        // Element (a, b) of operand `which` (0 q, 1 k, 2 v, 3 mask) at `l`.
        let get = |which: usize, a: usize, b: usize| -> f32 {
            let st = [p.q, p.k, p.v, p.mask][which].strides;
            let mut off = a as isize * st[rank] + b as isize * st[rank + 1];
            for (ax, &i) in idx.iter().enumerate() {
                off += i as isize * st[ax];
            }
            data[which][off as usize]
        };
        for i in 0..m {
            let mut x = vec![0.0f32; t];
            for (j, xj) in x.iter_mut().enumerate() {
                let mut s = 0.0f32;
                for dd in 0..d {
                    s = madd(fma, get(0, i, dd), get(1, dd, j), s);
                }
                *xj = s * p.scale + get(3, i, j);
            }
            let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let ex: Vec<f32> = x
                .iter()
                .map(|&xj| exp(p.numerics.fast_exp, xj - mx))
                .collect();
            let mut sum = 0.0f32;
            for &ej in &ex {
                sum += ej;
            }
            for c in 0..e {
                let mut acc = 0.0f32;
                for (j, &ej) in ex.iter().enumerate() {
                    acc = madd(fma, ej / sum, get(2, j, c), acc);
                }
                out[(l * m + i) * e + c] = if acc.is_nan() { CANONICAL_NAN } else { acc };
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The AVX-512F/BW/VL path. Every loop over a row's columns goes 16 at a
    //! time, the last vector under a lane mask, so nothing past a row is
    //! read, and no load's address lies past the data even where its mask
    //! is empty (slow on Zen 4: `matmul`'s `pack_a16`).

    use super::*;
    use std::arch::x86_64::*;

    /// Query rows of a register tile: each vector of k (or v) loaded is
    /// used by this many rows.
    const ROWS: usize = 4;

    /// Query rows of a block, whose scores are in scratch together (rows
    /// of `t`): sixteen, one per lane of the softmax's sums.
    const BLOCK: usize = 16;

    /// Vectors of 16 columns per register tile: with [`ROWS`] rows, 16
    /// accumulators plus the 4 vectors loaded per step.
    const VECS: usize = 4;

    /// AVX-512F on this host, as the rest of the JIT decides it
    /// (`crate::host::avx512`: a host described as AVX2-only takes the
    /// portable path here too), with BW and VL, for the 16-bit keys and
    /// values loaded under 16-lane masks.
    pub(super) fn available() -> bool {
        crate::host::avx512()
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }

    /// The lane mask of a vector with `left` columns left (all 16 from 16).
    fn lanes(left: usize) -> __mmask16 {
        if left >= 16 {
            0xffff
        } else {
            (1u16 << left) - 1
        }
    }

    /// A rounding of step 1 or 7, per `FMA`, lane by lane.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    fn madd_v<const FMA: bool>(a: __m512, b: __m512, acc: __m512) -> __m512 {
        if FMA {
            _mm512_fmadd_ps(a, b, acc)
        } else {
            _mm512_add_ps(acc, _mm512_mul_ps(a, b))
        }
    }

    /// [`exp_fast`] on 16 lanes: its operations up to `s`, then `s·2ⁿ`
    /// rounded once as its two factors round it, and its edge cases; the
    /// same bits on every input (`fast_exp_vector_equals_scalar`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(super) fn exp_fast_v(x: __m512) -> __m512 {
        let (hi, lo) = (_mm512_set1_ps(EXP_HI), _mm512_set1_ps(EXP_LO));
        // `min_ps` returns its second operand where either is NaN: as
        // `minnum`, a NaN x clamps to `hi` (and comes back at the end).
        let xc = _mm512_max_ps(_mm512_min_ps(x, hi), lo);
        let t = _mm512_mul_ps(xc, _mm512_set1_ps(std::f32::consts::LOG2_E));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
        let r0 = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(EXP_C1)));
        let r = _mm512_sub_ps(r0, _mm512_mul_ps(n, _mm512_set1_ps(EXP_C2)));
        let mut p = _mm512_set1_ps(EXP_P[0]);
        for &c in &EXP_P[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let s0 = _mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r);
        let s = _mm512_add_ps(s0, _mm512_set1_ps(1.0));
        // `s·2ⁿ` rounded once: the scalar path's two exact-then-rounding
        // factors in one `vscalefps` (n is an integer in [-150, 128], s in
        // [0.7, 1.5]), nine vector operations fewer per 16 lanes.
        let y = _mm512_scalef_ps(s, n);
        // Below `lo` (-104) x was clamped to it, whose `s·2⁻¹⁵⁰` (s < 1)
        // rounds to 0: the scalar path's zero without a test.
        let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi);
        let y = _mm512_mask_mov_ps(y, over, _mm512_set1_ps(f32::INFINITY));
        _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), x)
    }

    /// [`super::run`] with AVX-512F/BW/VL.
    ///
    /// # Safety
    /// [`super::run`]'s contract; AVX-512F/BW/VL available.
    // SAFETY: (contract) met by `super::run` under `available`.
    pub(super) unsafe fn run(p: &Problem<'_>, out: *mut f32, range: Range<usize>) {
        let total = check(p, &range);
        if p.m == 0 || p.e == 0 || range.is_empty() {
            return;
        }
        let n = p.lead.len();
        // k's and v's columns are loaded 16 at a time: strided ones are
        // copied contiguous once per leading index, for all its rows
        // (narrow ones widened on the way). Contiguous narrow ones are
        // widened as the tiles load them.
        let copied = |o: &Operand<'_>| o.strides[n + 1] != 1;
        let kcopy = usize::from(copied(&p.k)) * p.d * p.t;
        let vcopy = usize::from(copied(&p.v)) * p.t * p.e;
        SCRATCH.with_borrow_mut(|buf| {
            grow(buf, kcopy + vcopy + BLOCK * p.t);
            let (kb, rest) = buf.split_at_mut(kcopy);
            let (vb, sb) = rest.split_at_mut(vcopy);
            for l in range {
                // SAFETY: `l < L` (checked); the scratch sized above;
                // AVX-512F/BW/VL (the contract).
                unsafe {
                    if p.numerics.fma {
                        lead_index::<true>(p, (l, total), out, kb, vb, sb);
                    } else {
                        lead_index::<false>(p, (l, total), out, kb, vb, sb);
                    }
                }
            }
        });
    }

    /// Every query row of leading index `l` (of `total`, L), [`ROWS`] at a
    /// time: scores into `sb`, softmax there, then the product with v into
    /// `out`.
    ///
    /// # Safety
    /// `run`'s contract with `l < L`; `kb` holds d·t floats where k's
    /// columns are strided, `vb` t·e where v's are, `sb` ROWS·t.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `run`, its only caller.
    unsafe fn lead_index<const FMA: bool>(
        p: &Problem<'_>,
        (l, total): (usize, usize),
        out: *mut f32,
        kb: &mut [f32],
        vb: &mut [f32],
        sb: &mut [f32],
    ) {
        let (t, e) = (p.t, p.e);
        let [q, k, v, mask] = [p.q, p.k, p.v, p.mask].map(|o| o.at(p.lead, l));
        // The next leading index's keys and values, requested (into L2)
        // while this one's products run: a decode step reads each
        // sequence's cache once, from beyond L2, and a head's own requests
        // (a few rows ahead) come too late to hide that. `attention_bench
        // 16 100 f16` with `ATTN_FLUSH_MB=512`, one thread: 8.8–9.5 →
        // 7.3–7.9 ms; `step_bench` at 16 rows, 150 steps: 17.8–18.3 →
        // 17.1–17.4 ms. (Into L1 instead, the requests waited for fill
        // buffers: 17.4–17.6 ms.)
        let (k_then, v_then) = if l + 1 < total {
            let (kn, vn) = (p.k.at(p.lead, l + 1), p.v.at(p.lead, l + 1));
            (Then::of(kn, p.d, t), Then::of(vn, t, e))
        } else {
            (None, None)
        };
        let (q, mask) = (q.mat(), mask.mat());
        // Many query rows re-read k and v once per row block: after the
        // first, from cache.
        let many = p.m >= NEAR_ROWS;
        let (k_near, v_near) = (many || k.cs != 1, many || v.cs != 1);
        // SAFETY: k's and v's elements at `l` (the contract); scratch sizes.
        let (k, v) = unsafe { (contiguous(k, p.d, t, kb), contiguous(v, t, e, vb)) };
        // A head of at most two vectors (MiniLM's 32) gives the products
        // with v only 8 accumulators in a tile of ROWS rows, each chain's
        // next FMA waiting on its last: twice the rows where v is in cache.
        let pv_rows = if v_near && v.elem == Elem::F32 && e <= 32 {
            NEAR_PV_ROWS
        } else {
            ROWS
        };
        let mut i = 0;
        while i < p.m {
            // A block of up to BLOCK rows: its scores in tiles of ROWS,
            // then its softmax (the sums of sixteen rows at once), then
            // its products with v in tiles of ROWS.
            let r = BLOCK.min(p.m - i);
            for i0 in (0..r).step_by(ROWS) {
                let scores = Product {
                    a: q.row(i + i0),
                    b: k,
                    then: if i + i0 == 0 { k_then } else { None },
                    near: k_near,
                    inner: p.d,
                    rows: ROWS.min(r - i0),
                    cols: t,
                    c: sb[i0 * t..].as_mut_ptr(),
                    c_rs: t,
                };
                // SAFETY: q's rows `i + i0..` (at most `r`, inside `0..m`),
                // k whole, `sb` holds BLOCK·t from row `i0`.
                unsafe { product::<FMA>(&scores) };
            }
            for (rr, row) in sb[..r * t].chunks_exact_mut(t).enumerate() {
                // SAFETY: mask row `i + rr < m` at `l` (the contract).
                unsafe { exps(mask.row(i + rr), p.scale, p.numerics.fast_exp, row) };
            }
            normalize(&mut sb[..r * t], r, t);
            for i0 in (0..r).step_by(pv_rows) {
                let rows = pv_rows.min(r - i0);
                let pv = Product {
                    a: Mat {
                        ptr: sb[i0 * t..].as_ptr(),
                        rs: t,
                        cs: 1,
                    },
                    b: v,
                    then: if i + i0 == 0 { v_then } else { None },
                    near: v_near,
                    inner: t,
                    rows,
                    cols: e,
                    c: out.wrapping_add((l * p.m + i + i0) * e),
                    c_rs: e,
                };
                // SAFETY: `sb`'s rows `i0..i0 + rows` of t; v whole; the
                // output's rows `i + i0..` at `l` (the contract).
                unsafe {
                    product::<FMA>(&pv);
                    canonical_nans(pv.c, rows, e);
                }
            }
            i += r;
        }
    }

    /// The NaNs of `rows` contiguous output rows of `cols` made
    /// [`CANONICAL_NAN`], as the composition's last op, a matmul, makes a
    /// NaN sum (Section 4 §5.4): the op then has its bits, NaNs included.
    ///
    /// # Safety
    /// `c`'s `rows × cols` floats writable.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `lead_index`.
    unsafe fn canonical_nans(c: *mut f32, rows: usize, cols: usize) {
        let canon = _mm512_set1_ps(CANONICAL_NAN);
        for r in 0..rows {
            for n in (0..cols).step_by(16) {
                let mk = lanes(cols - n);
                let at = c.wrapping_add(r * cols + n);
                // SAFETY: row `r < rows`, columns `n..` under the mask.
                unsafe {
                    let x = _mm512_maskz_loadu_ps(mk, at);
                    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x) & mk;
                    if nan != 0 {
                        _mm512_mask_storeu_ps(at, nan, canon);
                    }
                }
            }
        }
    }

    /// `m` (`rows × cols`) with contiguous columns: itself (of any
    /// element type: the tiles widen narrow ones as they load them), or
    /// copied into `buf` as f32, row-major: by 16 × 16 register transposes
    /// where an f32 `m`'s rows are contiguous (a MiniLM head's k: element
    /// by element, the copy took a seventh of the call, and gathers were
    /// no faster on Zen 4), else element by element, widened.
    ///
    /// # Safety
    /// Every element of `m` readable; `buf` holds rows·cols when `m.cs !=
    /// 1`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `lead_index`.
    unsafe fn contiguous(m: Src, rows: usize, cols: usize, buf: &mut [f32]) -> Src {
        if m.cs == 1 {
            return m;
        }
        let buf = &mut buf[..rows * cols];
        if m.rs == 1 && m.elem == Elem::F32 {
            for a0 in (0..rows).step_by(16) {
                for b0 in (0..cols).step_by(16) {
                    // SAFETY: `a0 < rows`, `b0 < cols`; `buf` as above.
                    unsafe { transpose(m.mat(), (a0, b0), (rows, cols), buf.as_mut_ptr()) };
                }
            }
        } else {
            for (a, row) in buf.chunks_exact_mut(cols.max(1)).enumerate().take(rows) {
                for (b, x) in row.iter_mut().enumerate() {
                    // SAFETY: `a < rows`, `b < cols` (the contract).
                    *x = unsafe { m.get(a, b) };
                }
            }
        }
        Src {
            ptr: buf.as_ptr().cast(),
            elem: Elem::F32,
            rs: cols,
            cs: 1,
        }
    }

    /// The block of `m` (rows contiguous) from `(a0, b0)`, up to 16 × 16,
    /// into `dst` (`rows × cols`, row-major) through the registers.
    ///
    /// # Safety
    /// As [`contiguous`]', `m.rs == 1`, `a0 < rows`, `b0 < cols`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `contiguous`.
    unsafe fn transpose(
        m: Mat,
        (a0, b0): (usize, usize),
        (rows, cols): (usize, usize),
        dst: *mut f32,
    ) {
        let (ra, cb) = (lanes(rows - a0), cols - b0);
        let mut r = [_mm512_setzero_ps(); 16];
        for (b, x) in r.iter_mut().enumerate() {
            // Past `cols`, an empty mask at the last column's address, not
            // past the data (`pack_a16`: slow on Zen 4 there).
            let mk = if b < cb { ra } else { 0 };
            // SAFETY: column `b0 + b.min(cb - 1) < cols`, rows `a0..`
            // under the mask (the contract).
            *x = unsafe { _mm512_maskz_loadu_ps(mk, m.ptr.add(a0 + (b0 + b.min(cb - 1)) * m.cs)) };
        }
        // SAFETY: AVX-512F/BW/VL (the contract).
        let r = unsafe { crate::kernels::sweep::transpose16_regs(r) };
        for (a, x) in r.iter().enumerate().take(rows - a0) {
            // SAFETY: `dst`'s row `a0 + a < rows`, columns `b0..cols`.
            unsafe { _mm512_mask_storeu_ps(dst.add((a0 + a) * cols + b0), lanes(cb), *x) };
        }
    }

    /// `c[r][n] = Σ_k a[r][k]·b[k][n]` for `r < rows`, `n < cols`, each
    /// element's terms in increasing `k` from 0; b's columns contiguous,
    /// its elements of any [`Elem`] (widened exactly as they are loaded).
    struct Product {
        a: Mat,
        b: Src,
        /// The next leading index's matrix in b's place (its rows and the
        /// bytes of each), requested row by row while this product's
        /// first block of columns computes: see [`Ahead`].
        then: Option<Then>,
        /// b is in cache: copied into this thread's scratch, or read by
        /// every row block of many query rows (an encoder's prefill). The
        /// tiles then need none of [`Ahead`]'s requests, whose address
        /// arithmetic took registers and issue slots from the products.
        near: bool,
        inner: usize,
        rows: usize,
        cols: usize,
        c: *mut f32,
        c_rs: usize,
    }

    /// A matrix to request ahead: the next leading index's keys or values.
    #[derive(Clone, Copy)]
    struct Then {
        ptr: *const u8,
        /// Bytes from one row to the next.
        row_bytes: usize,
        /// Bytes of one row that the product will read.
        len: usize,
        rows: usize,
    }

    impl Then {
        /// `m` (the next leading index's operand, `rows × cols` read)
        /// when its rows are contiguous, as a cache's are.
        fn of(m: Src, rows: usize, cols: usize) -> Option<Then> {
            let eb = m.elem.bytes();
            // Only addresses for hints come of these (never dereferenced):
            // wrapping is harmless, and `len` is a row the product reads.
            (m.cs == 1).then(|| Then {
                ptr: m.ptr,
                row_bytes: m.rs.wrapping_mul(eb),
                len: cols.saturating_mul(eb),
                rows,
            })
        }
    }

    /// [`Elem`] as a const parameter of the tiles.
    const F32: u8 = 0;
    const F16: u8 = 1;
    const BF16: u8 = 2;

    /// A [`Product`], [`VECS`] vectors of columns at a time.
    ///
    /// # Safety
    /// AVX-512F/BW/VL; `1 ≤ rows ≤ ROWS` (≤ [`NEAR_PV_ROWS`] for an f32
    /// b in cache); a's `rows × inner` and b's `inner × cols` elements
    /// readable, `b.cs == 1`; c's `rows × cols` writable.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `lead_index`.
    unsafe fn product<const FMA: bool>(pr: &Product) {
        // SAFETY: this fn's contract, b's element type named.
        unsafe {
            match pr.b.elem {
                Elem::F32 if pr.near => near_product::<FMA>(pr),
                Elem::F32 => product_of::<FMA, F32>(pr),
                Elem::F16 => product_of::<FMA, F16>(pr),
                Elem::Bf16 => product_of::<FMA, BF16>(pr),
            }
        }
    }

    /// Query rows from which k and v count as in cache ([`Product::near`]).
    const NEAR_ROWS: usize = 16;

    /// Rows of a tile of the product with v in cache, f32, at most two
    /// vectors wide: 16 accumulators, as [`ROWS`] × [`VECS`].
    const NEAR_PV_ROWS: usize = 2 * ROWS;

    /// [`product`] of an f32 b in cache: the same tiles and the same
    /// chains as [`product_of`], each in a small function of its own
    /// with plain pointer steps and no look-ahead.
    ///
    /// # Safety
    /// As [`product`]'s, `pr.b.elem` f32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `product`.
    unsafe fn near_product<const FMA: bool>(pr: &Product) {
        let b = pr.b.ptr.cast::<f32>();
        for n in (0..pr.cols).step_by(16 * VECS) {
            let t = NearTile {
                a: pr.a.ptr,
                a_rs: pr.a.rs,
                a_cs: pr.a.cs,
                b: b.wrapping_add(n),
                b_rs: pr.b.rs,
                inner: pr.inner,
                left: pr.cols - n,
                c: pr.c.wrapping_add(n),
                c_rs: pr.c_rs,
            };
            // SAFETY: columns `n..cols` of b and c, rows `0..rows` (the
            // contract); the tile takes as many vectors as have a column.
            unsafe {
                match (pr.rows, t.left.div_ceil(16).min(VECS)) {
                    (4, 4) => near_tile::<4, 4, FMA>(&t),
                    (4, 2) => near_tile::<4, 2, FMA>(&t),
                    (8, 2) => near_tile::<8, 2, FMA>(&t),
                    (8, 1) => near_tile::<8, 1, FMA>(&t),
                    (r, nv) if r > ROWS => {
                        near_any::<FMA>(&t, ROWS, nv);
                        let rest = NearTile {
                            a: t.a.wrapping_add(ROWS * t.a_rs),
                            c: t.c.wrapping_add(ROWS * t.c_rs),
                            ..t
                        };
                        near_any::<FMA>(&rest, r - ROWS, nv);
                    }
                    (r, nv) => near_any::<FMA>(&t, r, nv),
                }
            }
        }
    }

    /// One tile's operands: a's `R` rows from `a` (element `(r, k)` at
    /// `a + r·a_rs + k·a_cs`), b's columns from `b` (row `k` at `b +
    /// k·b_rs`, `left` columns left), c's from `c`.
    struct NearTile {
        a: *const f32,
        a_rs: usize,
        a_cs: usize,
        b: *const f32,
        b_rs: usize,
        inner: usize,
        left: usize,
        c: *mut f32,
        c_rs: usize,
    }

    /// [`near_tile`] at any row and vector count (edge tiles).
    ///
    /// # Safety
    /// As [`near_tile`]'s, `1 ≤ r ≤ ROWS`, `1 ≤ nv ≤ VECS`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `near_product`.
    unsafe fn near_any<const FMA: bool>(t: &NearTile, r: usize, nv: usize) {
        // SAFETY: the contract, with `R == r`, `NV == nv`.
        unsafe {
            match (r, nv) {
                (1, 1) => near_tile::<1, 1, FMA>(t),
                (1, 2) => near_tile::<1, 2, FMA>(t),
                (1, 3) => near_tile::<1, 3, FMA>(t),
                (1, _) => near_tile::<1, 4, FMA>(t),
                (2, 1) => near_tile::<2, 1, FMA>(t),
                (2, 2) => near_tile::<2, 2, FMA>(t),
                (2, 3) => near_tile::<2, 3, FMA>(t),
                (2, _) => near_tile::<2, 4, FMA>(t),
                (3, 1) => near_tile::<3, 1, FMA>(t),
                (3, 2) => near_tile::<3, 2, FMA>(t),
                (3, 3) => near_tile::<3, 3, FMA>(t),
                (3, _) => near_tile::<3, 4, FMA>(t),
                (_, 1) => near_tile::<4, 1, FMA>(t),
                (_, 2) => near_tile::<4, 2, FMA>(t),
                (_, 3) => near_tile::<4, 3, FMA>(t),
                _ => near_tile::<4, 4, FMA>(t),
            }
        }
    }

    /// `R` rows × `NV` vectors of columns, [`tile`]'s chains (each
    /// element's terms in increasing k from 0, one lane each).
    ///
    /// # Safety
    /// AVX-512F/BW/VL; a's `R × inner`, b's `inner` rows of `min(left,
    /// 16·NV)` columns readable, c's `R` rows of them writable; at least
    /// one column in the last vector.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline(never)]
    // SAFETY: (contract) met by `near_product` and `near_any`.
    unsafe fn near_tile<const R: usize, const NV: usize, const FMA: bool>(t: &NearTile) {
        let mut mk = [0u16; NV];
        for (v, m) in mk.iter_mut().enumerate() {
            *m = lanes(t.left.saturating_sub(16 * v));
        }
        let mut acc = [[_mm512_setzero_ps(); NV]; R];
        let (mut ap, mut bp) = (t.a, t.b);
        for _ in 0..t.inner {
            // SAFETY: row k of b under the masks, a's `(r, k)` for `r <
            // R` (the contract; `ap`, `bp` step one k at a time).
            unsafe {
                let mut bv = [_mm512_setzero_ps(); NV];
                for (v, (x, &m)) in bv.iter_mut().zip(&mk).enumerate() {
                    *x = _mm512_maskz_loadu_ps(m, bp.add(16 * v));
                }
                for (r, accr) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*ap.add(r * t.a_rs));
                    for (a, &y) in accr.iter_mut().zip(&bv) {
                        *a = madd_v::<FMA>(x, y, *a);
                    }
                }
            }
            ap = ap.wrapping_add(t.a_cs);
            bp = bp.wrapping_add(t.b_rs);
        }
        for (r, accr) in acc.iter().enumerate() {
            for (v, (&s, &m)) in accr.iter().zip(&mk).enumerate() {
                // SAFETY: c's row `r < R`, columns under the mask (the
                // contract).
                unsafe { _mm512_mask_storeu_ps(t.c.add(r * t.c_rs + 16 * v), m, s) };
            }
        }
    }

    /// [`product`] with b's elements of type `E`.
    ///
    /// # Safety
    /// As [`product`]'s, `E` naming `pr.b.elem`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `product`.
    unsafe fn product_of<const FMA: bool, const E: u8>(pr: &Product) {
        for n in (0..pr.cols).step_by(16 * VECS) {
            // SAFETY: columns `n..cols` of b and c; the tile takes as many
            // vectors as have a column (the contract).
            unsafe {
                match (pr.cols - n).div_ceil(16) {
                    1 => by_rows::<1, FMA, E>(pr, n),
                    2 => by_rows::<2, FMA, E>(pr, n),
                    3 => by_rows::<3, FMA, E>(pr, n),
                    _ => by_rows::<VECS, FMA, E>(pr, n),
                }
            }
        }
    }

    /// [`tile`] at `pr.rows` rows.
    ///
    /// # Safety
    /// As [`product_of`]'s, for the columns `n..min(n + 16·NV, cols)`, at
    /// least one of them in the last vector.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `product_of`.
    unsafe fn by_rows<const NV: usize, const FMA: bool, const E: u8>(pr: &Product, n: usize) {
        // SAFETY: the contract, `rows` in 1..=ROWS.
        unsafe {
            match pr.rows {
                1 => tile::<1, NV, FMA, E>(pr, n),
                2 => tile::<2, NV, FMA, E>(pr, n),
                3 => tile::<3, NV, FMA, E>(pr, n),
                4 => tile::<4, NV, FMA, E>(pr, n),
                _ => unreachable!("attention: a row block is 1..=ROWS rows"),
            }
        }
    }

    /// 16 elements of type `E` from element `at` of `p` under the mask
    /// (the others 0), widened to f32: exact for both 16-bit types
    /// (`vcvtph2ps` for f16, a shift for bf16).
    ///
    /// # Safety
    /// The masked elements readable.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    // SAFETY: (contract) met by `tile`'s bounds.
    unsafe fn load<const E: u8>(p: *const u8, at: usize, m: __mmask16) -> __m512 {
        // SAFETY: the masked elements are readable (the contract); a
        // masked load does not touch the others.
        unsafe {
            match E {
                F32 => _mm512_maskz_loadu_ps(m, p.cast::<f32>().add(at)),
                F16 => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.cast::<i16>().add(at))),
                _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                    _mm256_maskz_loadu_epi16(m, p.cast::<i16>().add(at)),
                ))),
            }
        }
    }

    /// `R` rows × `NV` vectors of columns: each element's chain in a
    /// register lane, each b vector loaded (and widened) once for the `R`
    /// rows.
    ///
    /// # Safety
    /// As [`by_rows`]', `R == pr.rows`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    // SAFETY: (contract) met by `by_rows`.
    unsafe fn tile<const R: usize, const NV: usize, const FMA: bool, const E: u8>(
        pr: &Product,
        n: usize,
    ) {
        // Plain loops with constant bounds, no closures (one is not inlined
        // into an AVX-512 function, and the vectors go through memory).
        let mut mk = [0u16; NV];
        for (v, m) in mk.iter_mut().enumerate() {
            *m = lanes(pr.cols - n - 16 * v);
        }
        let mut acc = [[_mm512_setzero_ps(); NV]; R];
        let ahead = Ahead::new(pr, n, NV);
        for kk in 0..pr.inner {
            ahead.request(pr, kk);
            // SAFETY: row `kk < inner` of b, columns `n..` under the masks;
            // a's `(r, kk)`, `r < R` (the contract).
            unsafe {
                let brow = kk * pr.b.rs + n;
                let mut bv = [_mm512_setzero_ps(); NV];
                for (v, (x, &m)) in bv.iter_mut().zip(&mk).enumerate() {
                    *x = load::<E>(pr.b.ptr, brow + 16 * v, m);
                }
                for (r, accr) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(pr.a.get(r, kk));
                    for (a, &y) in accr.iter_mut().zip(&bv) {
                        *a = madd_v::<FMA>(x, y, *a);
                    }
                }
            }
        }
        for (r, accr) in acc.iter().enumerate() {
            for (v, (&s, &m)) in accr.iter().zip(&mk).enumerate() {
                // SAFETY: c's row `r < R`, columns `n..` under the mask (the
                // contract).
                unsafe { _mm512_mask_storeu_ps(pr.c.add(r * pr.c_rs + n + 16 * v), m, s) };
            }
        }
    }

    /// What a [`tile`] asks the memory for while it computes: b is a
    /// sequence's cached keys or values, read once per call and (for a
    /// server's batch of sequences) from DRAM, and a decode step's product
    /// has too few rows for the loads' latency to hide behind arithmetic:
    /// the tile stalled on b's loads (48 % of its samples on one load).
    /// The keys' rows (positions along a row, one row per head dim) are
    /// strided, which the hardware prefetcher does not follow, so each
    /// row's next block of columns is requested while this block computes
    /// (a tile of 64 rows ahead of its use); the values' rows are one
    /// block wide and consecutive, so the rows [`AHEAD_ROWS`] on are
    /// requested. Hints only: no value changes, and a prefetch never
    /// faults (addresses are formed with `wrapping_add`, inside b's rows).
    struct Ahead {
        /// Column offset of the next block of b's row, and its vectors.
        next: Option<(usize, usize)>,
        /// The next leading index's matrix ([`Product::then`]), on the
        /// first block of columns only: its row `kk` is requested into L2
        /// at this product's step `kk` (the two have as many rows as this
        /// product has steps), a whole head of compute ahead of its use.
        then: Option<Then>,
    }

    /// How far ahead [`Ahead`] requests b's rows when there is no next
    /// block of columns: about a DRAM latency of a tile's arithmetic.
    const AHEAD_ROWS: usize = 8;

    impl Ahead {
        fn new(pr: &Product, n: usize, nv: usize) -> Self {
            let at = n + 16 * nv;
            Ahead {
                next: (at < pr.cols).then(|| (at, (pr.cols - at).div_ceil(16).min(nv))),
                then: pr.then.filter(|_| n == 0),
            }
        }

        #[inline(always)]
        fn request(&self, pr: &Product, kk: usize) {
            let eb = pr.b.elem.bytes();
            let line = |row: usize, col: usize| {
                let p = pr.b.ptr.wrapping_add((row * pr.b.rs + col) * eb);
                // SAFETY: a prefetch reads nothing architecturally and
                // never faults, whatever the address.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
            };
            if let Some(th) = self.then.filter(|th| kk < th.rows) {
                let row = th.ptr.wrapping_add(kk.wrapping_mul(th.row_bytes));
                // Every line of the row, its last one too when the row
                // does not start on a line.
                for off in (0..th.len).step_by(64).chain([th.len.saturating_sub(1)]) {
                    // SAFETY: a prefetch reads nothing architecturally and
                    // never faults, whatever the address.
                    unsafe { _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(off).cast()) };
                }
            }
            // A line holds 64 / eb elements: one request per line.
            let step = 64 / eb;
            match self.next {
                Some((at, vecs)) => (0..vecs * 16).step_by(step).for_each(|c| line(kk, at + c)),
                None if kk + AHEAD_ROWS < pr.inner => (0..pr.cols)
                    .step_by(step)
                    .for_each(|c| line(kk + AHEAD_ROWS, c)),
                None => {}
            }
        }
    }

    /// Steps 2–4 on one row of scores, in place: x_j, then e_j.
    ///
    /// # Safety
    /// `mask` addresses a readable mask row of `row.len()` elements.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    // SAFETY: (contract) met by `lead_index`.
    unsafe fn exps(mask: Mat, scale: f32, fast: bool, row: &mut [f32]) {
        let n = row.len();
        if mask.cs != 1 {
            for (j, x) in row.iter_mut().enumerate() {
                // SAFETY: `j < t` of the mask row (the contract).
                *x = *x * scale + unsafe { mask.get(0, j) };
            }
        }
        // The row's maximum, taken as each x_j is made (a contiguous mask)
        // or read: the same lane-wise maxima in the same order either way.
        let (sc, ptr) = (_mm512_set1_ps(scale), row.as_mut_ptr());
        let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
        for o in (0..n).step_by(16) {
            let m = lanes(n - o);
            // SAFETY: elements `o..` of the row and (contiguous) the mask
            // row, under the mask (the contract).
            let x = unsafe {
                let x = _mm512_maskz_loadu_ps(m, ptr.add(o));
                if mask.cs == 1 {
                    let s = _mm512_mul_ps(x, sc);
                    let x = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, mask.ptr.add(o)));
                    _mm512_mask_storeu_ps(ptr.add(o), m, x);
                    x
                } else {
                    x
                }
            };
            mx = _mm512_mask_max_ps(mx, m, mx, x);
        }
        let mx = _mm512_reduce_max_ps(mx);
        if !fast {
            for x in row.iter_mut() {
                *x = exp_std(*x - mx);
            }
            return;
        }
        let mxv = _mm512_set1_ps(mx);
        for o in (0..n).step_by(16) {
            let m = lanes(n - o);
            // SAFETY: the row's elements `o..` under the mask.
            unsafe {
                let x = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, ptr.add(o)), mxv);
                _mm512_mask_storeu_ps(ptr.add(o), m, exp_fast_v(x));
            }
        }
    }

    /// Steps 5–6 on the `r ≤ BLOCK` rows of `t` in `rows`: the rows'
    /// sums (each in order: sixteen rows in the lanes of one vector, fewer
    /// interleaved so their latencies overlap), then each row divided by
    /// its sum.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn normalize(rows: &mut [f32], r: usize, t: usize) {
        let mut sums = [0f32; BLOCK];
        if r == BLOCK {
            sums = lane_sums(rows, t);
        } else {
            for (i0, s) in (0..r).step_by(ROWS).zip(sums.chunks_mut(ROWS)) {
                let block = &rows[i0 * t..];
                match (r - i0).min(ROWS) {
                    1 => row_sums::<1>(block, t, s),
                    2 => row_sums::<2>(block, t, s),
                    3 => row_sums::<3>(block, t, s),
                    _ => row_sums::<ROWS>(block, t, s),
                }
            }
        }
        for (row, &sum) in rows.chunks_exact_mut(t).zip(&sums).take(r) {
            let (ptr, s) = (row.as_mut_ptr(), _mm512_set1_ps(sum));
            for o in (0..t).step_by(16) {
                let m = lanes(t - o);
                // SAFETY: the row's elements `o..t` under the mask.
                unsafe {
                    let x = _mm512_maskz_loadu_ps(m, ptr.add(o));
                    _mm512_mask_storeu_ps(ptr.add(o), m, _mm512_div_ps(x, s));
                }
            }
        }
    }

    /// The sums of [`BLOCK`] rows of `t`, row `r` in lane `r`: each 16 ×
    /// 16 block of columns transposed in registers, so that lane `r` adds
    /// row `r`'s elements one at a time in increasing j from 0, the
    /// sequential sum of step 5 (a row at a time, each addition waited for
    /// the one before it).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn lane_sums(rows: &[f32], t: usize) -> [f32; BLOCK] {
        let rows = &rows[..BLOCK * t];
        let mut acc = _mm512_setzero_ps();
        for j0 in (0..t).step_by(16) {
            let (w, m) = ((t - j0).min(16), lanes(t - j0));
            let mut x = [_mm512_setzero_ps(); 16];
            for (r, x) in x.iter_mut().enumerate() {
                // SAFETY: row `r < BLOCK`, columns `j0..j0 + w ≤ t` under
                // the mask, inside `rows` (sliced above).
                *x = unsafe { _mm512_maskz_loadu_ps(m, rows.as_ptr().add(r * t + j0)) };
            }
            // SAFETY: AVX-512F (this fn's features).
            let cols = unsafe { crate::kernels::sweep::transpose16_regs(x) };
            for c in cols.iter().take(w) {
                acc = _mm512_add_ps(acc, *c);
            }
        }
        let mut out = [0f32; BLOCK];
        // SAFETY: 16 writable floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
        out
    }

    /// The first `R` rows' sums (`R·t ≤ rows.len()`) into `out[..R]`, each
    /// from 0 in increasing j, the rows interleaved.
    fn row_sums<const R: usize>(rows: &[f32], t: usize, out: &mut [f32]) {
        let mut s = [0.0f32; R];
        for j in 0..t {
            for (r, sr) in s.iter_mut().enumerate() {
                *sr += rows[r * t + j];
            }
        }
        out[..R].copy_from_slice(&s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{RngAlgorithm, TestRng};

    /// What no output is: the cells a run must leave alone keep it.
    const SENTINEL: f32 = -7.77e33;

    /// One operand's layout: is the second matrix axis the contiguous
    /// one, the padding of the other, which leading axes (bits) and
    /// whether the rows broadcast.
    type Layout = (bool, usize, u8, bool);

    fn layout() -> impl Strategy<Value = Layout> {
        let pad = prop_oneof![Just(0usize), 1usize..20];
        (any::<bool>(), pad, any::<u8>(), prop::bool::weighted(0.2))
    }

    /// Strides of an operand `lead ++ [a, b]` laid out per `lo`, and a
    /// length that holds every element they address.
    fn strides(lead: &[usize], a: usize, b: usize, lo: Layout) -> (Vec<isize>, usize) {
        let (n, (inner_b, pad, bcast_lead, bcast_rows)) = (lead.len(), lo);
        let (rs, cs) = if inner_b { (b + pad, 1) } else { (1, a + pad) };
        let mut size = if inner_b { a * rs } else { b * cs };
        let mut st = vec![0isize; n + 2];
        st[n] = if bcast_rows { 0 } else { rs as isize };
        st[n + 1] = cs as isize;
        for ax in (0..n).rev() {
            if bcast_lead >> ax & 1 == 0 {
                st[ax] = size as isize;
                size *= lead[ax];
            }
        }
        (st, size.max(1))
    }

    /// `n` values uniform in ±`mag`, with `special` per mille of them ±∞,
    /// NaN or ±0 and `neg_big` per mille −1e30, drawn from `rng`.
    fn values(rng: &mut TestRng, n: usize, mag: f32, special: u64, neg_big: u64) -> Vec<f32> {
        let specials = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0];
        (0..n)
            .map(|_| {
                let (roll, u) = (rng.next_u64() % 1000, rng.next_u64());
                if roll < special {
                    specials[(u % 5) as usize]
                } else if roll < special + neg_big {
                    -1e30
                } else {
                    ((u >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * mag
                }
            })
            .collect()
    }

    /// A test case: lead, (m, d, t, e), the operands' layouts (q, k, v,
    /// mask), numerics, scale, the data (seed, each operand's magnitude,
    /// specials?, mask −1e30s?), and the first run's range (its ends as
    /// fractions of L in 1/65536).
    type Case = (
        Vec<usize>,
        (usize, usize, usize, usize),
        [Layout; 4],
        Numerics,
        f32,
        (u64, [usize; 4], bool, bool),
        (u16, u16),
    );

    fn case() -> impl Strategy<Value = Case> {
        let lead = prop::collection::vec(0usize..4, 0..=2);
        // Up to 29 query rows: from `NEAR_ROWS` on, every operand is
        // taken as in cache (`near_product`), and a second block of 16
        // rows has every remainder of the products with v in tiles of
        // `NEAR_PV_ROWS`.
        let mdte = (1usize..30, 0usize..41, 1usize..71, 1usize..41);
        let numerics =
            (any::<bool>(), any::<bool>()).prop_map(|(fma, fast_exp)| Numerics { fma, fast_exp });
        let scale = prop_oneof![Just(1.0f32), Just(0.125f32), -2.0f32..2.0];
        let data = (
            any::<u64>(),
            prop::array::uniform4(0usize..3),
            prop::bool::weighted(0.25),
            any::<bool>(),
        );
        (
            lead,
            mdte,
            prop::array::uniform4(layout()),
            numerics,
            scale,
            data,
            any::<(u16, u16)>(),
        )
    }

    /// Equal bits, or both NaN.
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits()
    }

    /// Runs `c` on the host's path over its range alone (the rest must
    /// keep the sentinel), then over the rest, and on the scalar path;
    /// both must equal the reference.
    fn check_case(c: &Case) -> Result<(), TestCaseError> {
        let (lead, (m, d, t, e), layouts, numerics, scale, data, range) = c;
        let (m, d, t, e, (seed, mags, specials, masked)) = (*m, *d, *t, *e, *data);
        // The case's data from its seed (proptest's ChaCha generator).
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key);
        let dims = [(m, d), (d, t), (t, e), (m, t)];
        let (mut st, mut data) = (Vec::new(), Vec::new());
        for (i, (&(a, b), &lo)) in dims.iter().zip(layouts).enumerate() {
            let (s, n) = strides(lead, a, b, lo);
            let mag = [1.0, 30.0, 1e4][mags[i]];
            let neg_big = if i == 3 && masked { 300 } else { 0 };
            data.push(values(
                &mut rng,
                n,
                mag,
                if specials { 3 } else { 0 },
                neg_big,
            ));
            st.push(s);
        }
        // The keys and values in f32, f16 or bf16 (the seed picks): the
        // reference reads their exact widenings.
        let elems = [Elem::F32, Elem::F16, Elem::Bf16];
        let kinds = [
            Elem::F32,
            elems[(seed % 3) as usize],
            elems[(seed / 3 % 3) as usize],
            Elem::F32,
        ];
        let mut narrow: Vec<Vec<u16>> = vec![Vec::new(); 4];
        for i in 1..3 {
            let bits: Vec<u16> = match kinds[i] {
                Elem::F16 => data[i]
                    .iter()
                    .map(|&x| half::f16::from_f32(x).to_bits())
                    .collect(),
                Elem::Bf16 => data[i]
                    .iter()
                    .map(|&x| half::bf16::from_f32(x).to_bits())
                    .collect(),
                Elem::F32 => continue,
            };
            data[i] = bits.iter().map(|&h| kinds[i].widen(h)).collect();
            narrow[i] = bits;
        }
        let op = |i: usize| Operand {
            ptr: match kinds[i] {
                Elem::F32 => data[i].as_ptr().cast::<u8>(),
                _ => narrow[i].as_ptr().cast::<u8>(),
            },
            elem: kinds[i],
            strides: &st[i],
        };
        let p = Problem {
            lead,
            m,
            d,
            t,
            e,
            q: op(0),
            k: op(1),
            v: op(2),
            mask: op(3),
            scale: *scale,
            numerics: *numerics,
        };
        let want = reference(&p, [&data[0], &data[1], &data[2], &data[3]]);
        let total: usize = lead.iter().product();
        let (lo, hi) = (usize::from(range.0), usize::from(range.1));
        let (a, b) = ((lo * total) >> 16, (hi * total) >> 16);
        let (r0, r1) = (a.min(b), a.max(b));
        let mut got = vec![SENTINEL; want.len()];
        // SAFETY: every operand's elements lie in `data`, `got` holds L·m·e.
        unsafe { run(&p, got.as_mut_ptr(), r0..r1) };
        for (at, (&g, &w)) in got.iter().zip(&want).enumerate() {
            if (r0..r1).contains(&(at / (m * e))) {
                prop_assert!(same(g, w), "at {at} (range {r0}..{r1}): {g:e} vs {w:e}");
            } else {
                prop_assert_eq!(
                    g.to_bits(),
                    SENTINEL.to_bits(),
                    "at {} outside {}..{}",
                    at,
                    r0,
                    r1
                );
            }
        }
        // SAFETY: as above.
        unsafe {
            run(&p, got.as_mut_ptr(), 0..r0);
            run(&p, got.as_mut_ptr(), r1..total);
        }
        let mut scalar = vec![SENTINEL; want.len()];
        // SAFETY: as above.
        unsafe { run_scalar(&p, scalar.as_mut_ptr(), 0..total) };
        for (at, ((&g, &s), &w)) in got.iter().zip(&scalar).zip(&want).enumerate() {
            prop_assert!(same(g, w), "host path at {at}: {g:e} vs {w:e}");
            prop_assert!(same(s, w), "scalar path at {at}: {s:e} vs {w:e}");
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Both paths equal the definition bit for bit on any shape,
        /// layout, rounding mode and data, saturated and non-finite
        /// included, and a run writes its range's leading indices alone.
        #[test]
        fn paths_equal_the_reference(c in case()) {
            check_case(&c)?;
        }
    }

    /// A range in the middle of a 2 × 3 lead writes its three leading
    /// indices and leaves the others.
    #[test]
    fn range_writes_only_its_leading_indices() {
        let lo = |inner_b| (inner_b, 3, 0, false);
        let numerics = Numerics {
            fma: true,
            fast_exp: true,
        };
        let layouts = [lo(true), lo(true), lo(false), lo(true)];
        let data = (7, [0; 4], false, true);
        // 2..5 of 6.
        check_case(&(
            vec![2, 3],
            (5, 20, 37, 19),
            layouts,
            numerics,
            0.125,
            data,
            (21_846, 54_614),
        ))
        .unwrap();
    }

    /// Every 4099th bit pattern, a dense walk over the finite domain, and
    /// the edges.
    fn exp_inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
        xs.extend((0..21_000).map(|i| -110.0 + i as f32 * 0.0095));
        // ±0, ±∞, NaNs, 88.72283 and the next, −104 and the next
        // towards 0, subnormals, the smallest normals.
        let edges = [
            0,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0xffc0_0001,
            0x42b1_7217,
            0x42b1_7218,
            0xc2d0_0000,
            0xc2cf_ffff,
            1,
            0x8000_0001,
            0x0080_0000,
            0x8080_0000,
        ];
        xs.extend(edges.map(f32::from_bits));
        xs.extend([-103.97, -87.3, -87.34, 0.5, -0.5]);
        xs
    }

    /// The vector fast exp gives the scalar one's bits on every input,
    /// and on every float whose result is subnormal (x in [-104, -87]) or
    /// scaled by 2¹²⁸ (x in [88, 88.73]), where its one `vscalefps` and
    /// the scalar path's two factors could part.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fast_exp_vector_equals_scalar() {
        use std::arch::x86_64::*;
        if !x86::available() {
            return;
        }
        let mut xs = exp_inputs();
        xs.extend((0xc2ae_0000u32..=0xc2d0_0000).map(f32::from_bits));
        xs.extend((0x42b0_0000u32..=0x42b1_7218).map(f32::from_bits));
        for chunk in xs.chunks(16) {
            let mut lanes = [0.0f32; 16];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let mut got = [0.0f32; 16];
            // SAFETY: AVX-512F/BW/VL (checked); 16 floats each side.
            unsafe {
                let y = x86::exp_fast_v(_mm512_loadu_ps(lanes.as_ptr()));
                _mm512_storeu_ps(got.as_mut_ptr(), y);
            }
            for (&x, &y) in lanes.iter().zip(&got) {
                assert!(
                    same(y, exp_fast(x)),
                    "exp({x:e}): vector {y:e}, scalar {:e}",
                    exp_fast(x)
                );
            }
        }
    }

    /// The fast exp is within 2.4e-7 of the true value for normal
    /// results, and exact at its edges.
    #[test]
    fn fast_exp_is_close() {
        for x in exp_inputs() {
            let (got, want) = (exp_fast(x), (x as f64).exp());
            if x.is_nan() {
                assert!(got.is_nan());
            } else if x > 88.722_83 {
                assert_eq!(got, f32::INFINITY, "exp({x:e})");
            } else if x < -104.0 {
                assert_eq!(got.to_bits(), 0, "exp({x:e})");
            } else if want >= f32::MIN_POSITIVE as f64 {
                let rel = ((got as f64 - want) / want).abs();
                assert!(
                    rel <= 2.4e-7,
                    "exp({x:e}) = {got:e}, true {want:e}, rel {rel:e}"
                );
            }
        }
    }
}
