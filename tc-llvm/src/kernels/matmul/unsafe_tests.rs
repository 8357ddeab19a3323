//! The f32 GEMM's plain-Rust `unsafe` run directly on small inputs: the
//! packers (scalar and AVX-512), a kept packing, the blocked and streamed
//! drivers with the micro-tile write, the sweep and `gemv` paths, and the
//! narrow-float conversions. Every operand lives in a buffer exactly as
//! long as the last element its view addresses (the gaps hold NaN), so an
//! access past it is an error under Miri (`scripts/miri.sh`) and a read
//! of a gap shows in the result.
//!
//! Miri cannot run the JIT's machine code. The drivers here run
//! [`ukr`], a Rust function of the compiled micro-kernel's contract
//! (`gemm_common::Ukr`) that touches exactly the memory the compiled one
//! does (its loads of C included), so the drivers' own pointer arithmetic
//! is what is checked. The AVX-512 paths run where the host (or, under
//! Miri, the build's target features) has AVX-512F; the scalar ones
//! elsewhere.

use std::mem::MaybeUninit;
use std::sync::Mutex;

use super::*;
use crate::kernels::gemm_common::{GemmElem, Ukr};

/// How a reference kernel steps an accumulator, as the compiled kernel of
/// its element type does: `acc + a·b`.
pub(crate) trait Step<E>: 'static {
    fn step(acc: E, a: E, b: E) -> E;
}

/// f32: one fused multiply-add.
pub(crate) struct Fma;

impl Step<f32> for Fma {
    fn step(acc: f32, a: f32, b: f32) -> f32 {
        a.mul_add(b, acc)
    }
}

/// The integer kernels: a wrapping multiply and add.
pub(crate) struct Wrap;

impl Step<i32> for Wrap {
    fn step(acc: i32, a: i32, b: i32) -> i32 {
        acc.wrapping_add(a.wrapping_mul(b))
    }
}

impl Step<i64> for Wrap {
    fn step(acc: i64, a: i64, b: i64) -> i64 {
        acc.wrapping_add(a.wrapping_mul(b))
    }
}

/// The pair kernel: two i16 per i32 lane, `pmaddwd` (`a₀b₀ + a₁b₁`,
/// wrapping) added to the lane.
pub(crate) struct Pmadd;

impl Step<i32> for Pmadd {
    fn step(acc: i32, a: i32, b: i32) -> i32 {
        let (a0, a1, b0, b1) = (a as i16, (a >> 16) as i16, b as i16, (b >> 16) as i16);
        let p = (a0 as i32 * b0 as i32).wrapping_add(a1 as i32 * b1 as i32);
        acc.wrapping_add(p)
    }
}

/// The [`Cols`] of a kernel's `COLS` parameter: 0 whole, 1 one vector, 2
/// two.
fn cols_of(c: u8) -> Cols {
    match c {
        0 => Cols::Whole,
        1 => Cols::One,
        _ => Cols::Two,
    }
}

/// A reference micro-kernel of the [`Ukr`] contract: `MR` rows, panels of
/// `NR` (two vectors of `NR / 2`), writing the columns of `COLS`
/// ([`cols_of`]); A packed `AST` elements per k step, or read in place
/// (`AST == 0`: row `i` at `a + i·lda`). Like the compiled kernel
/// (`gemm_common::ukernel_text`) it reads `kc` steps of the B vectors it
/// uses, and loads C's tile (whole vectors, or the masked lanes of the
/// last) before storing it, whether or not it accumulates.
///
/// # Safety
/// The [`Ukr`] contract (`gemm_common::call_ukr`): B holds `kc·NR`
/// elements, A `kc·AST` (or `MR` rows of `kc` at stride `lda`), and C an
/// `MR`-row tile of the kernel's columns at stride `ldc`, initialised
/// where it accumulates.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
pub(crate) unsafe extern "C" fn ukr<
    E: GemmElem,
    S: Step<E>,
    const MR: usize,
    const NR: usize,
    const COLS: u8,
    const AST: usize,
>(
    kc: i64,
    a: *const u8,
    b: *const u8,
    c: *mut u8,
    ldc: i64,
    accum: i64,
    lda: i64,
    ncols: i64,
) {
    let (kc, ldc, lda) = (kc as usize, ldc as usize, lda as usize);
    let (a, b, c) = (a.cast::<E>(), b.cast::<E>(), c.cast::<E>());
    let vw = NR / 2;
    let vecs = if COLS == 1 { 1 } else { 2 };
    let width = if COLS == 0 { NR } else { ncols as usize };
    assert!(
        kc >= 1 && width <= vecs * vw && width > (vecs - 1) * vw,
        "the kernel's columns"
    );
    let mut acc = [[E::default(); NR]; MR];
    // SAFETY: A's `(i, s)`, `i < MR`, `s < kc`, B's `kc` rows of `NR`
    // (the first `vecs·vw` of each read) and the tile's `MR` rows of
    // `width` columns are what the contract makes valid; C is read as
    // `MaybeUninit` (the compiled kernel loads it and then selects).
    unsafe {
        for s in 0..kc {
            for (i, row) in acc.iter_mut().enumerate() {
                let x = if AST > 0 {
                    a.add(s * AST + i).read()
                } else {
                    a.add(i * lda + s).read()
                };
                for (j, y) in row[..vecs * vw].iter_mut().enumerate() {
                    *y = S::step(*y, x, b.add(s * NR + j).read());
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, &v) in row[..width].iter().enumerate() {
                let p = c.add(i * ldc + j);
                let old = p.cast::<MaybeUninit<E>>().read();
                p.write(if accum != 0 {
                    old.assume_init().acc(v)
                } else {
                    v
                });
            }
        }
    }
}

/// Kernels made for the tests, kept for the process as compiled ones are
/// (reachable from here, so not leaks).
static KEPT: Mutex<Vec<&'static Micro>> = Mutex::new(Vec::new());

/// `R` rows of the reference f32 kernel, panels `NR` wide, columns
/// `COLS`, A packed `AST` wide (0: in place).
fn micro<const R: usize, const NR: usize, const COLS: u8, const AST: usize>() -> &'static Micro {
    let f: Ukr = ukr::<f32, Fma, R, NR, COLS, AST>;
    keep(Micro::of_fn(f, cols_of(COLS), R, NR))
}

/// `m` kept for the process.
pub(crate) fn keep(m: Micro) -> &'static Micro {
    let m: &'static Micro = Box::leak(Box::new(m));
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).push(m);
    m
}

/// The f32 kernels of tile `MR × NR` with `E` edge rows and ragged
/// columns `C` (`AST` as [`micro`]); `edge`, `ragged`: whether those
/// exist (without them [`tile_into_c`] takes its scratch tile).
fn kernels<const MR: usize, const E: usize, const NR: usize, const C: u8, const AST: usize>(
    edge: bool,
    ragged: bool,
) -> Kernels<'static> {
    Kernels {
        full: micro::<MR, NR, 0, AST>(),
        edge: edge.then(micro::<E, NR, 0, AST>),
        ragged: ragged.then(micro::<MR, NR, C, AST>),
        ragged_edge: (edge && ragged).then(micro::<E, NR, C, AST>),
    }
}

/// `f` on a pool of two threads that are joined before this returns
/// (Miri reports threads still running at exit, as the global pool's
/// would be).
pub(crate) fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_scoped(|t| t.run(), |pool| pool.install(f))
        .expect("a pool of two threads")
}

/// An `r × c` operand at strides `(rs, cs)`: element `(i, j)` is `f(i,
/// j)`, the buffer ends at the last one (empty when `r` or `c` is 0) and
/// every element between holds NaN.
fn operand(
    r: usize,
    c: usize,
    (rs, cs): (usize, usize),
    f: impl Fn(usize, usize) -> f32,
) -> Vec<f32> {
    if r == 0 || c == 0 {
        return Vec::new();
    }
    let mut v = vec![f32::NAN; (r - 1) * rs + (c - 1) * cs + 1];
    for i in 0..r {
        for j in 0..c {
            v[i * rs + j * cs] = f(i, j);
        }
    }
    v
}

/// Small integers, so every product and sum below is exact in f32.
fn val(i: usize, j: usize) -> f32 {
    ((i * 7 + j * 3) % 11) as f32 - 5.0
}

/// The strides of an `r × c` operand: row-major with padding, transposed
/// with padding, and neither unit.
fn layouts(r: usize, c: usize) -> [(usize, usize); 3] {
    [(c + 3, 1), (1, r + 2), (2 * c + 1, 2)]
}

/// `A · B` in f64 (exact here), row-major `m × n`.
fn reference(m: usize, n: usize, k: usize, a: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|s| a(i, s) as f64 * val(s, j) as f64)
                .sum::<f64>() as f32;
        }
    }
    c
}

/// The A operand of the drivers' tests (B is [`val`]).
fn a_val(i: usize, s: usize) -> f32 {
    ((i * 5 + s) % 7) as f32 - 3.0
}

#[test]
fn packers_write_the_panel_layouts() {
    // Rows of A fewer than a tile and more; k across a 16-column block
    // (the AVX-512 transposes) and not; a K-block from column 0 and one
    // from past it (the second only where k > 1).
    for (rows, depth) in [(1, 1), (3, 5), (15, 18)] {
        for &(rs, cs) in &layouts(rows, depth) {
            let a = operand(rows, depth, (rs, cs), val);
            let view = View::new(a.as_ptr(), rs, cs);
            for mr in [4, 14] {
                for row0 in (0..rows).step_by(mr) {
                    for (pc, kc) in [(0, depth), (depth / 3, depth - depth / 3)] {
                        let mut dst = vec![f32::NAN; kc * mr];
                        // SAFETY: rows `row0..rows` and columns `pc..pc +
                        // kc` lie inside `a` (`operand`).
                        unsafe { pack_a_panel(&view, pc, kc, row0, mr, rows, &mut dst) };
                        for (idx, &x) in dst.iter().enumerate() {
                            let (kk, r) = (idx / mr, idx % mr);
                            let want = if row0 + r < rows {
                                val(row0 + r, pc + kk)
                            } else {
                                0.0
                            };
                            assert_eq!(x, want, "A {rows}×{depth} ({rs},{cs}) mr={mr} row0={row0} pc={pc} [{kk},{r}]");
                        }
                    }
                }
            }
        }
    }
    // Columns of B fewer than a panel and more (16 × 16 transposes of a
    // transposed B, and its ragged tiles).
    for (depth, cols) in [(1, 1), (5, 3), (17, 20)] {
        for &(rs, cs) in &layouts(depth, cols) {
            let b = operand(depth, cols, (rs, cs), val);
            let view = View::new(b.as_ptr(), rs, cs);
            for nr in [16, 32] {
                // The last panel wholly past `n`: padding, for which no
                // pointer into B may be formed (one can lie past B's
                // allocation: the scalar path formed one, undefined).
                for col0 in (0..cols + nr).step_by(nr) {
                    for (pc, kc) in [(0, depth), (depth / 3, depth - depth / 3)] {
                        let mut dst = vec![f32::NAN; kc * nr];
                        // SAFETY: rows `pc..pc + kc` and columns `col0..cols`
                        // lie inside `b`.
                        unsafe { pack_b_panel(&view, pc, kc, col0, nr, cols, &mut dst) };
                        let want = |kk: usize, c: usize| {
                            if col0 + c < cols {
                                val(pc + kk, col0 + c)
                            } else {
                                0.0
                            }
                        };
                        for (idx, &x) in dst.iter().enumerate() {
                            let (kk, c) = (idx / nr, idx % nr);
                            assert_eq!(x, want(kk, c), "B {depth}×{cols} ({rs},{cs}) nr={nr} col0={col0} pc={pc} [{kk},{c}]");
                        }
                    }
                }
                // Several panels per visit of a row, the last ragged or
                // past `n` altogether; from a panel past `n`, all padding.
                let panels = cols.div_ceil(nr) + 1;
                for col0 in [0, (panels - 1) * nr] {
                    let mut dst = vec![f32::NAN; panels * depth * nr];
                    // SAFETY: rows `0..depth`, columns `col0..cols` inside `b`.
                    unsafe { pack_b_panels(&view, (0, depth), (col0, panels), nr, cols, &mut dst) };
                    for (idx, &x) in dst.iter().enumerate() {
                        let (p, kk, c) = (idx / (depth * nr), idx / nr % depth, idx % nr);
                        let j = col0 + p * nr + c;
                        let want = if j < cols { val(kk, j) } else { 0.0 };
                        assert_eq!(
                            x, want,
                            "panels {depth}×{cols} ({rs},{cs}) nr={nr} col0={col0} [{p},{kk},{c}]"
                        );
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_register_transpose_reads_and_writes_16_strided_rows() {
    if !avx512() {
        return;
    }
    let (ss, ds) = (19, 21);
    let src = operand(16, 16, (ss, 1), val);
    let mut dst = vec![f32::NAN; 15 * ds + 16];
    // SAFETY: AVX-512F (`avx512()`); 16 rows of 16 at stride `ss` in
    // `src`, at stride `ds` in `dst`, each buffer ending at its last row.
    unsafe { transpose16(src.as_ptr(), ss, dst.as_mut_ptr(), ds) };
    for i in 0..16 {
        for c in 0..16 {
            assert_eq!(dst[i * ds + c], val(c, i), "({i}, {c})");
        }
    }
}

#[test]
fn a_kept_packing_holds_b_where_its_panels_say() {
    let kc = params().1;
    // One K-block and two, the second one row; panels past a tile.
    for (k, n) in [(1, 1), (3, 37), (kc + 1, 3)] {
        for &(rs, cs) in &layouts(k, n)[..2] {
            let b = operand(k, n, (rs, cs), val);
            for par in [false, true] {
                let view = View::new(b.as_ptr(), rs, cs);
                // SAFETY: `b` holds the `k × n` view.
                let p = on_pool(|| unsafe { PackedB::pack(&view, k, n, par) }.unwrap());
                assert_eq!(p.slab().as_ptr() as usize % 64, 0);
                for pc in (0..k).step_by(p.kc) {
                    for q in 0..n.div_ceil(p.nr) {
                        for (idx, &x) in p.panel(pc, q).iter().enumerate() {
                            let (i, j) = (pc + idx / p.nr, q * p.nr + idx % p.nr);
                            let want = if j < n { val(i, j) } else { 0.0 };
                            assert_eq!(x, want, "{k}×{n} ({rs},{cs}) par={par} ({i}, {j})");
                        }
                    }
                }
            }
        }
    }
}

/// [`F32Gemm`] with blocks of its own: small ones make the blocked driver
/// walk several column, depth and row blocks on small products.
struct Blocks<'p> {
    f: F32Gemm<'p>,
    blocks: (usize, usize, usize),
}

impl Family for Blocks<'_> {
    type E = f32;
    type Src = View;

    fn kernels(&self) -> Kernels<'_> {
        self.f.kernels()
    }

    fn blocks(&self) -> (usize, usize, usize) {
        self.blocks
    }

    fn slots(&self, kc: usize) -> usize {
        self.f.slots(kc)
    }

    // SAFETY: (contract) `Family::pack_a`'s, passed on unchanged.
    unsafe fn pack_a(
        &self,
        a: &View,
        pc: usize,
        kc: usize,
        row0: usize,
        mr: usize,
        m: usize,
        dst: &mut [f32],
    ) {
        // SAFETY: the same contract.
        unsafe { self.f.pack_a(a, pc, kc, row0, mr, m, dst) }
    }

    // SAFETY: (contract) `Family::pack_b`'s, passed on unchanged.
    unsafe fn pack_b(
        &self,
        b: &View,
        pc: usize,
        kc: usize,
        col0: usize,
        nr: usize,
        n: usize,
        dst: &mut [f32],
    ) {
        // SAFETY: the same contract.
        unsafe { self.f.pack_b(b, pc, kc, col0, nr, n, dst) }
    }

    fn take_b(&self) -> Vec<f32> {
        self.f.take_b()
    }

    fn b_block<'a>(&self, buf: &'a mut Vec<f32>, need: usize) -> &'a mut [f32] {
        self.f.b_block(buf, need)
    }

    fn give_b(&self, buf: Vec<f32>) {
        self.f.give_b(buf)
    }

    fn take_a(&self, len: usize) -> Vec<f32> {
        self.f.take_a(len)
    }

    fn give_a(&self, buf: Vec<f32>) {
        self.f.give_a(buf)
    }

    fn packed_b_block(&self, pc: usize, kc: usize, jc: usize, nc: usize) -> Option<&[f32]> {
        self.f.packed_b_block(pc, kc, jc, nc)
    }
}

/// One product through [`blocked`] (with `blocks`, or the family's own
/// when `None`) or [`streamed`], operands laid out as `la`, `lb`, into a C
/// of exactly `m·n` floats (NaN before), checked against [`reference`].
#[allow(clippy::too_many_arguments)]
fn product(
    ks: Kernels<'static>,
    (m, n, k): (usize, usize, usize),
    (la, lb): ((usize, usize), (usize, usize)),
    blocks: Option<(usize, usize, usize)>,
    stream: Option<bool>,
    pre: Option<&PackedB>,
    par: bool,
    what: &str,
) {
    let a = operand(m, k, la, a_val);
    let b = operand(k, n, lb, val);
    let (va, vb) = (
        View::new(a.as_ptr(), la.0, la.1),
        View::new(b.as_ptr(), lb.0, lb.1),
    );
    let mut c = vec![f32::NAN; m * n];
    let cp = SendPtr(c.as_mut_ptr());
    let a_rows = stream == Some(true);
    on_pool(|| {
        #[allow(clippy::redundant_locals)]
        let cp = cp;
        let f = F32Gemm { ks, pre, a_rows };
        // SAFETY: `m, n, k ≥ 1`; the views lie inside `a` and `b`
        // (`operand`), C is `m·n` floats of its own; tiles of at most 14 ×
        // 32; for the streamed path `m` is one row block, and kernels
        // reading A in place have an edge kernel for a partial panel.
        unsafe {
            match (stream, pre) {
                (Some(_), Some(p)) => streamed(&f, (m, n, k), &va, BSrc::Packed(p), cp.0, par),
                (Some(_), None) => streamed(&f, (m, n, k), &va, BSrc::View(&vb), cp.0, par),
                (None, _) => match blocks {
                    Some(blocks) => blocked(&Blocks { f, blocks }, (m, n, k), &va, &vb, cp.0, par),
                    None => blocked(&f, (m, n, k), &va, &vb, cp.0, par),
                },
            }
        }
    });
    let want = reference(m, n, k, a_val);
    for (idx, (x, y)) in c.iter().zip(&want).enumerate() {
        assert_eq!(
            x,
            y,
            "{what} {m}×{n}×{k} A{la:?} B{lb:?} par={par} at ({}, {})",
            idx / n,
            idx % n
        );
    }
}

#[test]
fn the_blocked_driver_writes_every_tile_once() {
    // Tile 4 × 16, blocks of 8 steps of k (three K-blocks, the last one
    // step), one row panel and two column panels: a last row panel of 3
    // rows and a last column panel of 5 columns (one vector) or 12 (two),
    // by the edge and masked kernels or by the full kernel into the
    // scratch tile and copied; A and B row-major, transposed or neither.
    let cases = [
        (37, true, true, ((18, 1), (40, 1)), false),
        (37, true, true, ((1, 9), (1, 18)), true),
        (37, false, false, ((35, 2), (75, 2)), false),
        (28, true, false, ((18, 1), (28, 1)), true),
    ];
    for (n, edge, ragged, layout, par) in cases {
        let ks = if n % 16 <= 8 {
            kernels::<4, 3, 16, 1, 4>(edge, ragged)
        } else {
            kernels::<4, 3, 16, 2, 4>(edge, ragged)
        };
        let what = format!("blocked edge={edge} ragged={ragged}");
        product(
            ks,
            (7, n, 17),
            layout,
            Some((8, 4, 32)),
            None,
            None,
            par,
            &what,
        );
    }
    // Tile 3 × 32, one K-block, the family's own blocks.
    let ks = kernels::<3, 2, 32, 2, 3>(true, true);
    product(
        ks,
        (8, 58, 5),
        ((5, 1), (58, 1)),
        None,
        None,
        None,
        false,
        "blocked 3×32",
    );
}

/// Tile rows and width of the host's packings ([`geometry`]).
fn host_kernels<const NR: usize>(a_in_place: bool, ragged: u8) -> Kernels<'static> {
    match (a_in_place, ragged) {
        (false, 1) => kernels::<4, 3, NR, 1, 4>(true, true),
        (false, _) => kernels::<4, 3, NR, 2, 4>(true, true),
        (true, 1) => kernels::<4, 3, NR, 1, 0>(true, true),
        (true, _) => kernels::<4, 3, NR, 2, 0>(true, true),
    }
}

#[test]
fn the_streamed_driver_and_a_kept_packing() {
    let nr = geometry().1;
    let ks = |in_place: bool, n: usize| {
        let ragged = if 2 * (n % nr) <= nr { 1 } else { 2 };
        if nr == 32 {
            host_kernels::<32>(in_place, ragged)
        } else {
            host_kernels::<16>(in_place, ragged)
        }
    };
    // Panels packed per call, several per visit of B's rows (five
    // panels: a visit of four and one), A packed or read in place, on one
    // thread or split. Rows: one panel of 3, or a whole one and 3 (the
    // edge kernel's rows).
    let cases = [
        (3, nr + 5, 7, false, false),
        (3, nr + 5, 7, true, true),
        (7, 4 * nr + 3, 9, false, true),
        (7, 4 * nr + 3, 9, true, false),
    ];
    for (m, n, k, in_place, par) in cases {
        let what = format!("streamed in_place={in_place}");
        product(
            ks(in_place, n),
            (m, n, k),
            ((k + 1, 1), (n, 1)),
            None,
            Some(in_place),
            None,
            par,
            &what,
        );
    }
    // B packed once, from a row-major or a transposed view, read by both
    // drivers (the blocked one K-block by K-block of the packing); two
    // K-blocks at depth `KC + 3`, the second added to the first.
    let kc = params().1;
    for (m, n, k, lb) in [
        (7, 4 * nr + 3, 9, (1, 10)),
        (3, nr - 1, kc + 3, (nr + 1, 1)),
    ] {
        let b = operand(k, n, lb, val);
        // SAFETY: `b` holds the `k × n` view.
        let p = unsafe { PackedB::pack(&View::new(b.as_ptr(), lb.0, lb.1), k, n, false) }.unwrap();
        let ks = ks(false, n);
        product(
            ks,
            (m, n, k),
            ((k, 1), lb),
            None,
            Some(false),
            Some(&p),
            m < 7,
            "streamed, kept",
        );
        product(
            ks,
            (m, n, k),
            ((k, 1), lb),
            None,
            None,
            Some(&p),
            false,
            "blocked, kept",
        );
    }
}

#[test]
fn sgemm_without_depth_writes_zeros_and_nothing_else() {
    let mut c = vec![f32::NAN; 12];
    let nowhere = std::ptr::NonNull::<f32>::dangling().as_ptr();
    let v = View::new(nowhere, 0, 0);
    // SAFETY: `k = 0`: A and B are never read; C is `3 × 4` floats.
    unsafe {
        sgemm(
            3,
            4,
            0,
            v,
            v,
            c.as_mut_ptr(),
            &crate::ctx::ExecCtx::on_this_thread(1),
        )
    }
    .unwrap();
    assert!(c.iter().all(|x| x.to_bits() == 0));
    // SAFETY: an empty C: nothing is read or written.
    unsafe {
        sgemm(
            0,
            4,
            5,
            v,
            v,
            nowhere,
            &crate::ctx::ExecCtx::on_this_thread(1),
        )
    }
    .unwrap();
}

#[test]
fn narrow_floats_widen_and_narrow_in_place() {
    for d in [Dtype::F16, Dtype::BF16, Dtype::F8E4M3, Dtype::F8E5M2] {
        for len in [0, 1, 5] {
            let xs: Vec<f32> = (0..len).map(|i| val(i, 1) * 0.5).collect();
            let width = d.bits() as usize / 8;
            // The storage, encoded in software; 16-bit storage is 2-byte
            // aligned, as tensor storage is.
            let mut want = vec![0u16; (len * width).div_ceil(2)];
            for (i, &x) in xs.iter().enumerate() {
                let bits = cast::encode_bits(x, d).unwrap().to_le_bytes();
                let bytes: &mut [u8] = bytemuck_bytes(&mut want);
                bytes[i * width..(i + 1) * width].copy_from_slice(&bits[..width]);
            }
            // SAFETY: `want` holds `len` elements of `d`, 2-byte aligned.
            let back = unsafe { widen(d, want.as_ptr().cast::<u8>(), len) }.unwrap();
            assert_eq!(back, xs, "{d}");
            // With F16C enabled at build time, `half` narrows f32 to F16 by
            // an instruction Miri does not implement (`vcvtps2ph`).
            if cfg!(all(miri, target_feature = "f16c")) && d == Dtype::F16 {
                continue;
            }
            let mut out = vec![0u16; want.len()];
            // SAFETY: `out` holds `len` elements of `d`.
            unsafe { narrow(d, &xs, out.as_mut_ptr().cast::<u8>()) };
            assert_eq!(out, want, "{d}");
        }
    }
}

/// `v`'s bytes.
fn bytemuck_bytes(v: &mut [u16]) -> &mut [u8] {
    // SAFETY: `v`'s `2·len` bytes, initialised (`u16` has no padding and
    // every byte of it is a valid `u8`), borrowed exclusively for the
    // result's lifetime.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), 2 * v.len()) }
}

#[cfg(target_arch = "x86_64")]
mod avx512_paths {
    use super::*;

    /// The packed layout [`crate::kernels::gemv::Panels`] reads, K-blocks of `kc`.
    fn panels_of(b: &[f32], (k, n): (usize, usize), kc: usize, nr: usize) -> Vec<f32> {
        let np = n.div_ceil(nr);
        let mut data = Vec::with_capacity(k * np * nr);
        for pc in (0..k).step_by(kc) {
            for q in 0..np {
                for kk in pc..(pc + kc).min(k) {
                    for c in q * nr..(q + 1) * nr {
                        data.push(if c < n { b[kk * n + c] } else { 0.0 });
                    }
                }
            }
        }
        data
    }

    #[test]
    fn gemv_over_panels_of_every_group_width() {
        if !crate::kernels::gemv::available(32) {
            return;
        }
        // Five panels: a group of four and one alone (two and three at
        // four rows), the last ragged; three K-blocks, the last short.
        let (k, n, kc) = (9, 4 * 32 + 21, 4);
        let b = operand(k, n, (n, 1), val);
        let data = panels_of(&b, (k, n), kc, 32);
        let panels = crate::kernels::gemv::Panels {
            data: &data,
            k,
            n,
            kc,
            nr: 32,
        };
        for m in 1..=crate::kernels::gemv::MAX_M {
            let x: Vec<f32> = (0..k * m).map(|idx| a_val(idx % m, idx / m)).collect();
            for par in [false, true] {
                let mut c = vec![f32::NAN; m * n];
                let cp = SendPtr(c.as_mut_ptr());
                on_pool(|| {
                    #[allow(clippy::redundant_locals)]
                    let cp = cp;
                    // SAFETY: `available(32)`; `m ≤ MAX_M`; the packing is
                    // whole; C is `m·n` floats of its own.
                    unsafe { crate::kernels::gemv::packed_rows(&x, m, &panels, cp.0, par) }
                });
                assert_eq!(c, reference(m, n, k, a_val), "m={m} par={par}");
            }
        }
    }

    #[test]
    fn sweeps_of_rows_and_columns() {
        let (k, n) = (37, 37);
        for (rs, cs) in [(n + 3, 1), (1, k + 2)] {
            let b = operand(k, n, (rs, cs), val);
            let bp = SendPtr(b.as_ptr().cast_mut());
            for m in [1, 3, 8] {
                if crate::kernels::sweep::available(m, k, (rs, cs)).is_none() {
                    return;
                }
                let x: Vec<f32> = (0..m * k).map(|idx| a_val(idx / k, idx % k)).collect();
                // K-blocks of 13 (8 + 4 + 1 rows at a step) and of 20 (a
                // whole 16-row transpose and a short one).
                for (kc, par) in [(13, false), (20, true), (64, false)] {
                    let mut c = vec![f32::NAN; m * n];
                    let cp = SendPtr(c.as_mut_ptr());
                    on_pool(|| {
                        #[allow(clippy::redundant_locals)]
                        let (cp, bp) = (cp, bp);
                        let w = crate::kernels::sweep::Weight {
                            ptr: bp.0.cast_const(),
                            rs,
                            cs,
                            k,
                            n,
                        };
                        // SAFETY: `available`; `x` is `m × k`; `b` holds the
                        // view; C is `m·n` floats of its own.
                        unsafe { crate::kernels::sweep::rows(&x, m, &w, kc, cp.0, par) }
                    });
                    assert_eq!(c, reference(m, n, k, a_val), "({rs},{cs}) m={m} kc={kc}");
                }
            }
        }
    }

    /// Keeps every packing it is asked about.
    struct KeepAll(Mutex<Vec<(ViewKey, std::sync::Arc<PackedB>)>>);

    impl PackCache for KeepAll {
        fn get(&self, key: &ViewKey) -> Lookup {
            let kept = self.0.lock().unwrap();
            match kept.iter().find(|(k, _)| k == key) {
                Some((_, p)) => Lookup::Hit(p.clone()),
                None => Lookup::Pack,
            }
        }

        fn put(&self, key: ViewKey, packed: std::sync::Arc<PackedB>) {
            self.0.lock().unwrap().push((key, packed));
        }
    }

    /// The public entry with no GEMM kernel to run: a few rows swept, or
    /// against a kept packing through `gemv`; batches folded into rows
    /// or not; NaNs made canonical.
    #[test]
    fn matmul_strided_without_the_gemm_kernels() {
        if !crate::host::avx512() {
            return;
        }
        let cache = KeepAll(Mutex::new(Vec::new()));
        let (m, k, n) = (2, 5, 19);
        // One matrix, or a batch folded into its rows (B shared by the
        // batch, stride 0); unfolded batches run the GEMM kernels.
        for batch in [1, 2] {
            let a = operand(batch * m, k, (k, 1), a_val);
            let b = operand(k, n, (n, 1), val);
            let (sa, sb) = ([batch, m, k], [batch, k, n]);
            let (st_a, st_b) = ([(m * k) as isize, k as isize, 1], [0, n as isize, 1]);
            let want: Vec<f32> = (0..batch)
                .flat_map(|p| reference(m, n, k, |i, s| a_val(p * m + i, s)))
                .collect();
            for kept in [None, Some(&cache as &dyn PackCache), Some(&cache)] {
                let mut c = vec![f32::NAN; batch * m * n];
                // SAFETY: `a`, `b` hold every element the shapes and
                // strides address; C is the output's `batch·m·n` floats.
                unsafe {
                    matmul_strided(
                        Dtype::F32,
                        a.as_ptr().cast(),
                        &st_a,
                        b.as_ptr().cast(),
                        &st_b,
                        c.as_mut_ptr().cast(),
                        &sa,
                        &sb,
                        &crate::ctx::ExecCtx::on_this_thread(1),
                        kept,
                    )
                }
                .unwrap();
                assert_eq!(c, want, "batch={batch} kept={}", kept.is_some());
            }
        }
        // A NaN in A: the output's NaNs are the canonical one.
        let mut a = operand(1, 3, (3, 1), a_val);
        a[1] = f32::from_bits(0x7fc0_1234);
        let b = operand(3, 2, (2, 1), val);
        let mut c = vec![0f32; 2];
        // SAFETY: as above, `1 × 3` by `3 × 2`.
        unsafe {
            matmul_strided(
                Dtype::F32,
                a.as_ptr().cast(),
                &[3, 1],
                b.as_ptr().cast(),
                &[2, 1],
                c.as_mut_ptr().cast(),
                &[1, 3],
                &[3, 2],
                &crate::ctx::ExecCtx::on_this_thread(1),
                None,
            )
        }
        .unwrap();
        assert!(c
            .iter()
            .all(|x| x.to_bits() == cast::CANONICAL_NAN.to_bits()));
    }
}

/// The in-order product (`in_order.rs`) on every layout of both operands,
/// B's column-strided copy included, with a guard float past C: it reads
/// exactly the views' elements (the gaps are NaN and would show) and
/// writes exactly C's `m·n`.
#[test]
fn the_in_order_product_reads_its_views_and_writes_c() {
    for (m, n, k) in [(1, 1, 1), (3, 5, 4), (4, 2, 0), (2, 7, 9)] {
        let want = reference(m, n, k, a_val);
        for la in layouts(m, k) {
            for lb in layouts(k, n) {
                let a = operand(m, k, la, a_val);
                let b = operand(k, n, lb, val);
                let mut c = vec![f32::NAN; m * n + 1];
                c[m * n] = 7.5;
                let (va, vb) = (
                    View::new(a.as_ptr(), la.0, la.1),
                    View::new(b.as_ptr(), lb.0, lb.1),
                );
                // SAFETY: `a` and `b` hold every element of the `m × k`
                // and `k × n` views (`operand`), `c` has `m·n` floats
                // before its guard and is a distinct buffer.
                unsafe {
                    in_order::sgemm_in_order(
                        m,
                        n,
                        k,
                        &va,
                        &vb,
                        c.as_mut_ptr(),
                        &crate::ctx::ExecCtx::on_this_thread(1),
                    )
                }
                .unwrap();
                assert_eq!(&c[..m * n], &want[..], "{m}×{n}×{k} {la:?} {lb:?}");
                assert_eq!(c[m * n], 7.5, "the guard past C");
            }
        }
    }
}
