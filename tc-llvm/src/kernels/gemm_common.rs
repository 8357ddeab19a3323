//! What the float GEMM ([`crate::kernels::matmul`]) and the integer GEMM
//! ([`crate::kernels::matmul_int`]) share: the register-tile micro-kernel emitter
//! and its compiled form, the one blocked driver ([`blocked`], generic over
//! a [`Family`] of element types, issue #14), the micro-tile write with its
//! partial-tile copy, and the batched matmul shape rule with its checked
//! element counts. It sits below both so neither imports the other's
//! internals (issue #14: no import cycles between files).

use rayon::prelude::*;

use crate::jit::{Build, JitModule};
use crate::llvm_ir::{Block, Builder, LoopMd, Phi, Ty, V};
use crate::options::Error;

/// Fewest multiply-adds of a product split across threads outside a
/// [`crate::team::session`]: about 50 µs of one core's work. A split wakes
/// the other pool workers, which costs tens of µs on a VM when they have
/// gone to sleep; below this the wake-ups cost more than the second core
/// gains (issue #15: MiniLM at batch 1, whose products are 1.5–6 M
/// multiply-adds, took 5.0–5.3 ms on two threads with a 2^18 threshold and
/// 3.2–3.8 ms with this one, interleaved runs).
pub const PAR_MIN_MACS: usize = 1 << 23;

/// The same inside a session, where the other workers are awake and steal
/// a split at once: about 6 µs of one core's work.
pub const PAR_MIN_MACS_SESSION: usize = 1 << 20;

/// What differs between the register-tile micro-kernels (f32 here, the
/// integer ones in [`crate::kernels::matmul_int`]); [`ukernel_text`] emits the
/// rest, which they share: the signature
/// `ukr(kc, A, packed B, C, ldc, accumulate, lda, ncols)`, `2·mr`
/// accumulator vectors `%acc{i}_{j}` of `vw` lanes, per step of k two B
/// vectors `%b{j}` and `mr` broadcasts `%as{i}` of A, and at the end C
/// loaded, added (when accumulating) and stored, `ldc` elements per row.
pub(crate) struct UkrSpec<'a> {
    /// Element type (`float`, `i32`, `i64`).
    pub elem: Ty,
    /// Lanes per vector (NR = 2·vw).
    pub vw: usize,
    /// Rows of the tile.
    pub mr: usize,
    /// How A's elements lie.
    pub a: ALayout,
    /// Extra instructions after B's vector `j` is loaded (its first
    /// element's address, the vector): the operand the steps take for it.
    pub after_b: &'a dyn Fn(&mut Builder, usize, &V, V) -> V,
    /// Extra instructions after row `i` of A is broadcast: the operand the
    /// steps take for it.
    pub after_a: &'a dyn Fn(&mut Builder, usize, V) -> V,
    /// The step of accumulator `(i, j)`, from it and the operands of A and
    /// B: the accumulator after it, `%n{i}_{j}`.
    pub step: &'a dyn Fn(&mut Builder, (usize, usize), &V, &V, &V) -> V,
    /// Alignment promised for C's loads and stores.
    pub c_align: u32,
    /// Copies of the k step per loop trip (`llvm.loop.unroll.count`; the
    /// pipeline unrolls only loops that ask, [`crate::host::PIPELINE`]).
    pub k_unroll: u32,
    /// Which columns of C the kernel writes.
    pub cols: Cols,
}

/// The columns of C a kernel writes: its variants for a ragged last
/// column panel (n not a multiple of NR) write it straight into C, where a
/// whole-tile kernel needs a scratch tile and a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cols {
    /// `nr` columns, two vectors per row; `ncols` is ignored.
    Whole,
    /// `1 ≤ ncols ≤ nr/2`: one vector per row, its lanes past `ncols`
    /// masked.
    One,
    /// `nr/2 < ncols ≤ nr`: two vectors per row, the second's lanes past
    /// `ncols` masked.
    Two,
}

impl Cols {
    /// The variant writing a ragged panel of `ncols < nr` columns.
    pub fn ragged(ncols: usize, nr: usize) -> Cols {
        if 2 * ncols <= nr {
            Cols::One
        } else {
            Cols::Two
        }
    }

    /// Does a kernel of this variant write exactly `ncols` of `nr`?
    pub fn fits(self, ncols: usize, nr: usize) -> bool {
        match self {
            Cols::Whole => ncols == nr,
            Cols::One => 1 <= ncols && 2 * ncols <= nr,
            Cols::Two => nr < 2 * ncols && ncols <= nr,
        }
    }

    /// Row of a kernel table (`Whole`, `One`, `Two`).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Where a micro-kernel reads A's `(row i, step k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ALayout {
    /// A packed panel, this many elements per k step (≥ `mr`: an edge
    /// kernel computes the first `mr` rows of a panel packed wider), at
    /// `a + k·stride + i`.
    Packed(usize),
    /// A itself, row-major: at `a + i·lda + k`, `lda` the kernel's last
    /// argument (f32 only: a product that does not repay packing A).
    /// With `ahead > 0` the kernel prefetches one of its rows per k step,
    /// `ahead` elements past `k`, each row in turn every 16 steps (a row's
    /// next 64-byte line every 16 floats).
    Rows {
        /// Elements ahead of `k` to prefetch (0: none).
        ahead: usize,
    },
}

/// The IR text of a micro-kernel module (see [`UkrSpec`]), `@ukr`, with
/// the host attributes of [`crate::jit::attributes`].
pub(crate) fn ukernel_text(k: &UkrSpec) -> String {
    let mut b = Builder::default();
    let f = kernel_fn(&mut b, k);
    b.module_text(&f, &crate::jit::attributes())
}

/// `@ukr`'s parameters (the [`Ukr`] signature), as operands.
struct Params {
    kc: V,
    a: V,
    b: V,
    c: V,
    ldc: V,
    accum: V,
    lda: V,
    ncols: V,
}

impl Params {
    fn new(b: &mut Builder, e: Ty) -> Params {
        let read = "noalias nocapture readonly";
        Params {
            kc: b.param(Ty::I64, "kc", ""),
            a: b.param(e.ptr(), "a", read),
            b: b.param(e.ptr(), "b", read),
            c: b.param(e.ptr(), "c", "noalias nocapture"),
            ldc: b.param(Ty::I64, "ldc", ""),
            accum: b.param(Ty::I64, "accum", ""),
            lda: b.param(Ty::I64, "lda", ""),
            ncols: b.param(Ty::I64, "ncols", ""),
        }
    }
}

/// An `i64` literal.
fn lit(x: usize) -> V {
    V::int(Ty::I64, x as i64)
}

/// The function `@ukr`: one or two vectors of C per row ([`UkrSpec::cols`]).
fn kernel_fn(b: &mut Builder, k: &UkrSpec) -> String {
    let p = Params::new(b, k.elem);
    let vecs = if k.cols == Cols::One { 1 } else { 2 };
    let entry = b.entry();
    b.switch_to(&entry);
    let rows = a_rows(b, k, &p);
    let cp = c_tile(b, k, &p, vecs);
    let (body, done) = (b.new_block("loop"), b.new_block("done"));
    b.br(&body);
    b.switch_to(&body);
    let n = k_loop(b, k, &p, &rows, vecs, [&entry, &body, &done]);
    b.switch_to(&done);
    write_c(b, k, &p, &cp, &n);
    b.define_void("ukr", "#0")
}

/// With A read in place, its rows' starts `%ar{i}`, computed once: the
/// loop then adds `k` to each.
fn a_rows(b: &mut Builder, k: &UkrSpec, p: &Params) -> Vec<V> {
    if !matches!(k.a, ALayout::Rows { .. }) {
        return Vec::new();
    }
    (0..k.mr)
        .map(|i| {
            let off = b.named(format_args!("aro{i}")).mul(&p.lda, &lit(i));
            b.named(format_args!("ar{i}")).gep(&p.a, &[&off])
        })
        .collect()
}

/// The C tile's vector addresses `%cp{i}_{j}`. It is read (when
/// accumulating) and written only after the k loop: ask for its lines
/// now, so they arrive while the loop runs. Each vector's first element
/// is one of the tile's columns (`j·vw < ncols`), inside C.
fn c_tile(b: &mut Builder, k: &UkrSpec, p: &Params, vecs: usize) -> Vec<Vec<V>> {
    (0..k.mr)
        .map(|i| {
            (0..vecs)
                .map(|j| {
                    let ro = b.named(format_args!("ro{i}_{j}")).mul(&p.ldc, &lit(i));
                    let co = b.named(format_args!("co{i}_{j}")).add(&ro, &lit(j * k.vw));
                    let cp = b.named(format_args!("cp{i}_{j}")).gep(&p.c, &[&co]);
                    let c8 = b.named(format_args!("pc8{i}_{j}"));
                    let c8 = c8.bitcast(&cp, Ty::I8.ptr());
                    b.prefetch(&c8, true);
                    cp
                })
                .collect()
        })
        .collect()
}

/// The k loop, `blocks` = (entry, loop, done): B (and a packed A) are
/// walked by pointers that step once per k, so the loop addresses them by
/// a constant offset from a register whatever the backend's loop strength
/// reduction does (it is off, `host::LLVM_OPTIONS`). The accumulators
/// after the last step.
fn k_loop(
    b: &mut Builder,
    k: &UkrSpec,
    p: &Params,
    rows: &[V],
    vecs: usize,
    [entry, body, done]: [&Block; 3],
) -> Vec<Vec<V>> {
    let first = |v: &V| [(v.clone(), entry.clone())];
    let kk = b.named("k").phi_open(&first(&lit(0)));
    let bk = b.named("bk").phi_open(&first(&p.b));
    let ak = matches!(k.a, ALayout::Packed(_)).then(|| b.named("ak").phi_open(&first(&p.a)));
    let zero = V::zeroinit(k.elem.vec(k.vw));
    let acc: Vec<Vec<Phi>> = (0..k.mr)
        .map(|i| {
            (0..vecs)
                .map(|j| b.named(format_args!("acc{i}_{j}")).phi_open(&first(&zero)))
                .collect()
        })
        .collect();
    let ptrs = [kk.value(), bk.value()];
    let (bk1, ak1, n) = k_step(b, k, p, rows, ptrs, ak.as_ref().map(Phi::value), &acc);
    let k1 = b.named("k1").add_nuw_nsw(kk.value(), &lit(1));
    let more = b.named("cc").icmp("ult", &k1, &p.kc);
    b.cond_br_loop(&more, body, done, LoopMd::unroll_count(k.k_unroll));
    let back = |v: &V| [(v.clone(), body.clone())];
    b.phi_close(kk, &back(&k1));
    b.phi_close(bk, &back(&bk1));
    if let (Some(ak), Some(ak1)) = (ak, ak1) {
        b.phi_close(ak, &back(&ak1));
    }
    for (phis, ns) in acc.into_iter().zip(&n) {
        for (phi, nv) in phis.into_iter().zip(ns) {
            b.phi_close(phi, &back(nv));
        }
    }
    n
}

/// `x` in every one of `lanes` lanes (`names`: of the one-lane vector and
/// of the splat).
fn splat(b: &mut Builder, x: &V, lanes: usize, names: [String; 2]) -> V {
    let v = x.ty.vec(lanes);
    let [one, all] = names;
    let x0 = b
        .named(one)
        .insertelement(&V::undef(v), x, &V::int(Ty::I32, 0));
    let mask = V::zeroinit(Ty::I32.vec(lanes));
    b.named(all).shufflevector(&x0, &V::undef(v), &mask)
}

/// One step of k at `[k, bk]` (and `ak`, A's packed panel): `vecs` B
/// vectors (the panel is `2·vw` wide whatever `vecs`), `mr` broadcasts of
/// A and the steps into `%n{i}_{j}`. The next `bk` and `ak`, and the
/// accumulators.
fn k_step(
    b: &mut Builder,
    k: &UkrSpec,
    p: &Params,
    rows: &[V],
    [kk, bk]: [&V; 2],
    ak: Option<&V>,
    acc: &[Vec<Phi>],
) -> (V, Option<V>, Vec<Vec<V>>) {
    let vw = k.vw;
    let bk1 = b.named("bk1").gep(bk, &[&lit(2 * vw)]);
    let bv: Vec<V> = (0..acc[0].len())
        .map(|j| {
            let bp = b.named(format_args!("bp{j}")).gep(bk, &[&lit(j * vw)]);
            let bq = b.named(format_args!("bq{j}"));
            let bq = bq.bitcast(&bp, k.elem.vec(vw).ptr());
            let bj = b.named(format_args!("b{j}")).load_align(&bq, 4);
            (k.after_b)(b, j, &bp, bj)
        })
        .collect();
    let ak1 = match (k.a, ak) {
        (ALayout::Packed(stride), Some(ak)) => Some(b.named("ak1").gep(ak, &[&lit(stride)])),
        (ALayout::Rows { ahead }, _) if ahead > 0 => {
            rows_prefetch(b, k.mr, p, kk, ahead);
            None
        }
        _ => None,
    };
    let n = acc
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let ap = b.named(format_args!("ap{i}"));
            let ap = match ak {
                Some(ak) => ap.gep(ak, &[&lit(i)]),
                None => ap.gep(&rows[i], &[kk]),
            };
            let a = b.named(format_args!("a{i}")).load_align(&ap, 4);
            let a = splat(b, &a, vw, [format!("ai{i}"), format!("as{i}")]);
            let a = (k.after_a)(b, i, a);
            (0..row.len())
                .map(|j| (k.step)(b, (i, j), row[j].value(), &a, &bv[j]))
                .collect()
        })
        .collect();
    (bk1, ak1, n)
}

/// The `done` block: the accumulators `n` written to C at `cp`, whole
/// vectors or, in a [`Cols`] variant, the last one's lanes past `ncols`
/// masked.
fn write_c(b: &mut Builder, k: &UkrSpec, p: &Params, cp: &[Vec<V>], n: &[Vec<V>]) {
    let ac = b.named("ac").icmp("ne", &p.accum, &lit(0));
    if k.cols == Cols::Whole {
        store_rows(b, k, &ac, cp, n, None);
        return;
    }
    // The last vector holds `rem = ncols − (vecs − 1)·vw ∈ 1..=vw`
    // columns (the caller's contract): a whole one, or masked.
    let vecs = n[0].len();
    let rem = b.named("rem").sub(&p.ncols, &lit((vecs - 1) * k.vw));
    let part = b.named("part").icmp("ult", &rem, &lit(k.vw));
    let (masked, whole) = (b.new_block("masked"), b.new_block("whole"));
    b.cond_br(&part, &masked, &whole);
    b.switch_to(&whole);
    store_rows(b, k, &ac, cp, n, None);
    b.switch_to(&masked);
    let lanes: Vec<i64> = (0..k.vw as i64).collect();
    let rems = splat(b, &rem, k.vw, ["remv".into(), "rems".into()]);
    let iota = V::int_vec(Ty::I64, &lanes);
    let mask = b.named("mask").icmp("ult", &iota, &rems);
    store_rows(b, k, &ac, cp, n, Some(&mask));
}

/// Every row's vectors stored whole, or, with a `mask`, its last one's
/// first `%rem` lanes only (masked load and store: the lanes past them,
/// past the tile's columns, are never touched); then the return.
fn store_rows(b: &mut Builder, k: &UkrSpec, ac: &V, cp: &[Vec<V>], n: &[Vec<V>], mask: Option<&V>) {
    let tag = if mask.is_some() { "m" } else { "w" };
    let v = k.elem.vec(k.vw);
    for (i, (cps, ns)) in cp.iter().zip(n).enumerate() {
        for (j, (cp, nv)) in cps.iter().zip(ns).enumerate() {
            let cq = b.named(format_args!("cq{tag}{i}_{j}")).bitcast(cp, v.ptr());
            let old = b.named(format_args!("old{tag}{i}_{j}"));
            let masked = mask.filter(|_| j + 1 == ns.len());
            let old = match masked {
                Some(m) => old.masked_load(&cq, k.c_align, m, &V::zeroinit(v)),
                None => old.load_align(&cq, k.c_align),
            };
            let sum = b.named(format_args!("sum{tag}{i}_{j}"));
            let sum = if k.elem.is_float() {
                sum.fadd(&old, nv)
            } else {
                sum.add(&old, nv)
            };
            let res = b
                .named(format_args!("res{tag}{i}_{j}"))
                .select(ac, &sum, nv);
            match masked {
                Some(m) => b.masked_store(&res, &cq, k.c_align, m),
                None => b.store_align(&res, &cq, k.c_align),
            }
        }
    }
    b.ret_void();
}

/// The loop body's prefetch of A read in place ([`ALayout::Rows`] with
/// `ahead > 0`): at step `k`, row `k mod 16` (row 0 when that is past the
/// kernel's `mr` rows) at column `k + ahead`. Not `inbounds`: the address
/// may lie past the row or past A (a hint, never dereferenced).
fn rows_prefetch(b: &mut Builder, mr: usize, p: &Params, kk: &V, ahead: usize) {
    let pk = b.named("pk").and(kk, &lit(15));
    let inside = b.named("pin").icmp("ult", &pk, &lit(mr));
    let row = b.named("pr").select(&inside, &pk, &lit(0));
    let off = b.named("pro").mul(&row, &p.lda);
    let off = b.named("pko").add(&off, kk);
    let off = b.named("pao").add(&off, &lit(ahead));
    let pa = b.named("pa").gep_any(&p.a, &[&off]);
    let pa8 = b.named("pa8").bitcast(&pa, Ty::I8.ptr());
    b.prefetch(&pa8, false);
}

/// The element counts `(batch, a, b, out)` of a batched matmul
/// `sa: p ++ [M, K]` × `sb: p ++ [K, N]`, each checked by
/// `tc_core::size::numel` (within the cap). Every product the routines
/// below form (`p·M·N`, `p·M·K`, `M·N·K` …) is then bounded by these counts
/// or by `MAX_ELEMS^1.5`, far below `usize::MAX`. `out == 0` means there is
/// nothing to write (and `batch` is then not needed: it may be over the cap
/// when another dim is 0).
pub fn checked_counts(sa: &[usize], sb: &[usize]) -> Result<(usize, usize, usize, usize), Error> {
    let r = sa.len();
    if r < 2 || sb.len() != r {
        return Err(Error::Unsupported(format!(
            "matmul of shapes {sa:?} and {sb:?}"
        )));
    }
    let size = |s: &[usize]| tc_core::size::numel(s).map_err(|e| Error::Runtime(e.into()));
    let mut so = sa[..r - 1].to_vec();
    so.push(sb[r - 1]);
    let out = size(&so)?;
    if out == 0 {
        return Ok((0, 0, 0, 0));
    }
    Ok((size(&sa[..r - 2])?, size(sa)?, size(sb)?, out))
}

/// `(batch, M, K, N)` of a matmul of shapes `sa = p ++ [M, K]` and
/// `sb = q ++ [K', N]`: an error unless the ranks are equal and ≥ 2,
/// `p = q` and `K = K'` (Section 2 §7, no batch broadcasting), or when an
/// operand's or the result's element count exceeds the cap
/// (`tc_core::size::MAX_ELEMS`).
pub(crate) fn matmul_dims(
    sa: &[usize],
    sb: &[usize],
) -> Result<(usize, usize, usize, usize), Error> {
    let r = sa.len();
    if r < 2 || sb.len() != r || sa[..r - 2] != sb[..r - 2] || sa[r - 1] != sb[r - 2] {
        return Err(Error::Unsupported(format!(
            "matmul of shapes {sa:?} and {sb:?}"
        )));
    }
    let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
    // Every count within the cap (`checked_counts`); an empty output has
    // batch 0 here, so `batch · m · n == 0` tells a caller to write nothing.
    let (batch, ..) = checked_counts(sa, sb)?;
    Ok((batch, m, k, n))
}

/// Row-major strides of a contiguous shape (checked: `tc_core::size::strides`;
/// a shape over the cap, which no planned value has, gets all-zero strides
/// rather than wrapped ones).
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    match tc_core::size::strides(shape) {
        Ok(st) => st.into_iter().map(|s| s as isize).collect(),
        Err(_) => vec![0; shape.len()],
    }
}

/// A compiled micro-kernel, `ukr(kc, A, packed B, C, ldc, accumulate,
/// lda, ncols)` (see [`ukernel_text`]). The pointers are untyped here so
/// that the f32 and the integer kernels share one type; [`call_ukr`] casts
/// them.
pub(crate) type Ukr = unsafe extern "C" fn(i64, *const u8, *const u8, *mut u8, i64, i64, i64, i64);

/// A micro-kernel and its tile (`mr × nr`). Its code lives as long as
/// the process ([`crate::jit::link_for_process`]), or as its own module
/// where it could not be linked there.
pub(crate) struct Micro {
    _module: Option<JitModule>,
    /// The kernel.
    pub f: Ukr,
    /// The columns of C it writes.
    pub cols: Cols,
    /// Rows of the tile.
    pub mr: usize,
    /// Columns of the tile (two vectors).
    pub nr: usize,
}

impl Micro {
    /// A kernel that is a Rust function of the [`Ukr`] contract rather
    /// than compiled code: the drivers' tests run under Miri, which cannot
    /// run the JIT's machine code.
    #[cfg(test)]
    pub(crate) fn of_fn(f: Ukr, cols: Cols, mr: usize, nr: usize) -> Micro {
        Micro {
            _module: None,
            f,
            cols,
            mr,
            nr,
        }
    }
}

/// Compile the IR text `ir` (which must define `ukr` as [`ukernel_text`]
/// does for a [`UkrSpec`] of `cols`) into a [`Micro`] of tile `mr × nr`.
pub(crate) fn compile_micro(ir: &str, mr: usize, nr: usize, cols: Cols) -> Result<Micro, String> {
    let (module, a) = match crate::jit::link_for_process(ir, "ukr") {
        Some(a) => (None, a),
        None => {
            let exports = ["ukr".to_string()];
            let store = crate::disk::Store::global();
            let m = JitModule::compile_built(ir, &[], &exports, store, Build::Unrolled)
                .map_err(|e| e.to_string())?;
            let a = m.addr("ukr").ok_or("ukr missing")?;
            (Some(m), a)
        }
    };
    // `ukernel_text` emits `ukr(i64 kc, T* a, T* b, T* c, i64 ldc, i64
    // accum, i64 lda, i64 ncols)` (renamed, with its body unchanged, in
    // the process-wide instance): the `Ukr` signature and C calling
    // convention (a pointer is a pointer to the C ABI whatever its
    // pointee).
    // SAFETY: `a` is ORC's address of that function, whose code lives as
    // long as the process (the shared instance is never disposed) or as
    // `module`, which `Micro` keeps next to `f`.
    let f: Ukr = unsafe { std::mem::transmute::<usize, Ukr>(a) };
    Ok(Micro {
        _module: module,
        f,
        cols,
        mr,
        nr,
    })
}

/// Kernel tables: one per [`Cols`] variant, each one kernel per row count
/// `1..=14`.
pub(crate) type Table = [[std::sync::OnceLock<Result<Micro, String>>; 14]; 3];

/// An empty [`Table`].
pub(crate) const fn table() -> Table {
    [const { [const { std::sync::OnceLock::new() }; 14] }; 3]
}

/// The kernel of `rows` rows (`1..=mr`, at most 14) writing `cols` in
/// tiles `nr` wide, from `table`: compiled from `ir()` the first time it
/// is asked for.
pub(crate) fn table_kernel(
    table: &'static Table,
    (rows, mr): (usize, usize),
    nr: usize,
    cols: Cols,
    ir: impl FnOnce() -> String,
) -> Result<&'static Micro, Error> {
    let t = &table[cols.index()];
    if rows == 0 || rows > mr || rows > t.len() {
        return Err(Error::Unsupported(format!("a kernel of {rows} rows")));
    }
    t[rows - 1]
        .get_or_init(|| compile_micro(&ir(), rows, nr, cols))
        .as_ref()
        .map_err(|e| Error::Llvm(e.clone()))
}

thread_local! {
    /// This thread is compiling a function's GEMM kernels ahead of its
    /// calls ([`ahead`]).
    static AHEAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, which prepares products' kernels while a function compiles
/// (`exec::prepare_products`), with [`kernel_set`] compiling a set's
/// missing kernels on parallel threads.
pub(crate) fn ahead<R>(f: impl FnOnce() -> R) -> R {
    crate::options::with_local(&AHEAD, true, f)
}

/// The kernels of a product of `n` columns, tile `mr × nr` and `edge`
/// rows in its last row panel if any: `get(rows, cols)` gives the kernel
/// of `rows` rows writing `cols`. The ragged column panel's masked
/// variants only where `masked` (the kernel family gains from them), `n`
/// is not a multiple of `nr` and `TC_MM_COLS` allows them: each is
/// compiled the first time a product needs it (≈ 10 ms of a cold start),
/// and most products never do.
pub(crate) fn kernel_set(
    n: usize,
    (mr, nr): (usize, usize),
    edge: Option<usize>,
    masked: bool,
    get: impl Fn(usize, Cols) -> Result<&'static Micro, Error> + Sync,
) -> Result<Kernels<'static>, Error> {
    let ragged =
        (masked && !n.is_multiple_of(nr) && column_kernels()).then(|| Cols::ragged(n % nr, nr));
    // Compiling ahead (`ahead`), the set's kernels on parallel threads: a
    // cold first product waited for them one after another (three GEMM
    // kernels of a MiniLM layer, 46 ms in a row). Each is then found
    // below. Never at a call: threads started per product cost more than
    // a small product.
    let mut wanted = vec![(mr, Cols::Whole)];
    wanted.extend(edge.map(|r| (r, Cols::Whole)));
    wanted.extend(ragged.map(|c| (mr, c)));
    wanted.extend(edge.zip(ragged));
    if wanted.len() > 1 && AHEAD.with(std::cell::Cell::get) {
        crate::offpool::map(&wanted, |&(r, c)| drop(get(r, c)));
    }
    Ok(Kernels {
        full: get(mr, Cols::Whole)?,
        edge: edge.map(|r| get(r, Cols::Whole)).transpose()?,
        ragged: ragged.map(|c| get(mr, c)).transpose()?,
        ragged_edge: match (edge, ragged) {
            (Some(r), Some(c)) => Some(get(r, c)?),
            _ => None,
        },
    })
}

/// The kernels of one product: `full` for whole tiles, `edge` for the
/// last row panel when `m` is not a multiple of `full.mr` (its first `m %
/// mr` rows), and the [`Cols`] variants of both for a ragged last column
/// panel (`n % nr` columns; [`tile_into_c`] takes a scratch tile where
/// one is missing).
#[derive(Clone, Copy)]
pub(crate) struct Kernels<'a> {
    /// Whole tiles.
    pub full: &'a Micro,
    /// The last row panel's rows, whole columns.
    pub edge: Option<&'a Micro>,
    /// `full`'s rows, the ragged column panel.
    pub ragged: Option<&'a Micro>,
    /// `edge`'s rows, the ragged column panel.
    pub ragged_edge: Option<&'a Micro>,
}

/// Call the kernel `f`: `c[0..mr, 0..ncols] (+)= A · b-panel` over `kc ≥
/// 1` packed k-slots, A a packed panel or (`lda`, [`ALayout::Rows`]
/// kernels only) `mr` rows of A in place.
///
/// # Safety
/// `f` is a kernel of element type `E` and tile `mr × nr`; the B panel
/// holds `kc·nr` elements of `E`, the A panel `kc·mr` (a packed kernel) or
/// `a + i·lda + s` is readable for `i < mr`, `s < kc` (a `Rows` kernel);
/// `c` is valid for an `mr × ncols` tile with leading dimension `ldc` that
/// no one else touches during the call, where the kernel's [`Cols`] fits
/// `ncols`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) met by `tile_into_c`, its only caller.
unsafe fn call_ukr<E>(
    f: Ukr,
    kc: usize,
    a: *const E,
    b: *const E,
    c: *mut E,
    ldc: usize,
    accum: bool,
    lda: usize,
    ncols: usize,
) {
    // SAFETY: the kernel reads exactly the two panels and reads/writes
    // exactly the tile's `ncols` columns (its IR, `ukernel_text`), valid by
    // the contract.
    unsafe {
        f(
            kc as i64,
            a.cast(),
            b.cast(),
            c.cast(),
            ldc as i64,
            accum as i64,
            lda as i64,
            ncols as i64,
        )
    };
}

/// A raw pointer that may cross into rayon tasks.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
// A `SendPtr` crosses threads only inside `blocked`, the f32 streamed path
// (`matmul::streamed`), `matmul::matmul_strided`, `matmul_int::batched`
// and the in-order rows (`matmul/in_order.rs`), which all join their tasks
// before returning (so the pointee outlives
// them); the tasks only read the operands and packed panels, and write
// disjoint parts of C (distinct column panels, row blocks or batch items).
// SAFETY: hence sending the pointer cannot create a data race.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as for `Send` just above.
unsafe impl<T> Sync for SendPtr<T> {}

/// An element (and accumulator) type of a kernel's C.
pub(crate) trait GemmElem: Copy + Default + Send + Sync + 'static {
    /// `self + o` as the kernel's accumulate path adds into C (`fadd`, or a
    /// wrapping `add`): the partial-tile copy must round the same way.
    fn acc(self, o: Self) -> Self;
}

impl GemmElem for f32 {
    #[inline(always)]
    fn acc(self, o: Self) -> Self {
        self + o
    }
}

impl GemmElem for i32 {
    #[inline(always)]
    fn acc(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
}

impl GemmElem for i64 {
    #[inline(always)]
    fn acc(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
}

/// Elements in the scratch tile of a partial panel: the largest micro-tile
/// (`MR ≤ 14` rows, `NR ≤ 32` columns; every kernel's geometry caps MR at
/// 14 and NR is two vectors of at most 16 lanes).
pub(crate) const TILE_MAX: usize = 14 * 32;

/// One micro-tile of C: `nrows × ncols` at `(row0, col0)`, from the packed
/// A panel at `a` (`kc × mr` slots) and B panel at `b` (`kc × nr`), added to
/// C when `accum`.
pub(crate) struct Tile<E> {
    /// Packed k-slots of the panels.
    pub kc: usize,
    /// First row in C.
    pub row0: usize,
    /// First column in C.
    pub col0: usize,
    /// Valid rows (≤ mr).
    pub nrows: usize,
    /// Valid columns (≤ nr).
    pub ncols: usize,
    /// Add into C rather than overwrite it.
    pub accum: bool,
    /// Packed A panel, or A's row `row0` at column `pc` when the kernels
    /// read A in place ([`ALayout::Rows`]).
    pub a: *const E,
    /// A's row stride for kernels reading it in place; unused (0) by
    /// packed kernels.
    pub lda: usize,
    /// Packed B panel.
    pub b: *const E,
}

/// Write ragged column panels with the kernels' masked forms (on) or
/// through a scratch tile (off); process-wide, for tests and measurements.
pub fn set_column_kernels(on: bool) {
    crate::ctx::Settings::get().mm_cols.set(on);
}

/// Whether ragged column panels take the kernels' [`Cols`] variants: the
/// kernels' masked forms ([`Micro::f1`]) unless `TC_MM_COLS=0` (or
/// [`set_column_kernels`]), which sends them through the scratch tile
/// (measurements, the equivalence test).
pub(crate) fn column_kernels() -> bool {
    crate::ctx::Settings::get().mm_cols.on()
}

/// Compute micro-tile `t` of the `m × n` C at `c`: the full kernel straight
/// into C for a whole tile, the edge kernel for the last row panel, their
/// [`Cols`] variants for a ragged last column panel; where the kernel
/// needed is missing, the whole-tile kernel of the tile's rows into a
/// scratch tile and the valid part copied (added with [`GemmElem::acc`]
/// when accumulating). The one body of every GEMM path.
///
/// # Safety
/// `t.b` holds `kc·nr` packed elements of `E`, the kernels of `ks` being
/// kernels of element type `E`, tile `mr × nr` (`full`'s), each of the
/// [`Cols`] its field says; `t.a` as [`call_ukr`] needs for the tile's
/// kernel (a packed panel of `kc·mr`, or, for [`ALayout::Rows`] kernels,
/// `t.nrows` rows of A in place); `c` is valid for `m·n` elements and `t`
/// lies inside it (`row0 + nrows ≤ m`, `col0 + ncols ≤ n`, `1 ≤ nrows ≤
/// mr`, `1 ≤ ncols ≤ nr`, `mr·nr ≤ TILE_MAX`), with no one else touching
/// that part during the call; `edge` and `ragged_edge`, if any, compute
/// the first `m % mr` rows of a panel packed `mr` wide (or of A in place).
/// Kernels reading A in place need `nrows == mr` or an `edge` (then every
/// tile has `nrows == mr` or is the last row panel's): the full kernel
/// would read rows past `m`.
#[inline(always)]
// SAFETY: (contract) met by `blocked` and `matmul::streamed`, its callers.
pub(crate) unsafe fn tile_into_c<E: GemmElem>(
    ks: &Kernels,
    t: &Tile<E>,
    (m, n): (usize, usize),
    c: *mut E,
) {
    let (mr, nr) = (ks.full.mr, ks.full.nr);
    // `whole` and `ragged` compute exactly the tile's rows, or `mr`
    // (padding past them).
    let (whole, ragged, exact) = match ks.edge {
        Some(e) if t.nrows == m % mr => (e, ks.ragged_edge, true),
        _ => (ks.full, ks.ragged, t.nrows == mr),
    };
    // The kernel writing exactly the tile into C: `exact` rows, and
    // columns its `Cols` fits.
    let direct = [Some(whole), ragged]
        .into_iter()
        .flatten()
        .find(|k| exact && k.cols.fits(t.ncols, nr));
    // `dst` is `(row0, col0)` inside C. The full kernel writes `mr` rows at
    // stride `n`, the edge kernel the first `m % mr = nrows` rows (the last
    // row panel: `row0 + nrows = m`), each `ncols` columns (its `Cols`).
    // Otherwise the whole-tile kernel writes at most `mr·nr ≤ TILE_MAX`
    // elements of `tile` at stride `nr`, and the `nrows × ncols` part is
    // copied.
    // SAFETY: so every access is inside `t`'s part of C or `tile` (contract).
    unsafe {
        let dst = c.add(t.row0 * n + t.col0);
        if let Some(k) = direct {
            call_ukr(k.f, t.kc, t.a, t.b, dst, n, t.accum, t.lda, t.ncols);
        } else {
            // Not zeroed (a 448-element memset per tile was 9% of a batch
            // of 16 × 16 products): the kernel writes all `nr` columns of
            // its rows, `nrows` or more, and only those are read back.
            let mut tile = std::mem::MaybeUninit::<[E; TILE_MAX]>::uninit();
            let tp = tile.as_mut_ptr().cast::<E>();
            call_ukr(whole.f, t.kc, t.a, t.b, tp, nr, false, t.lda, nr);
            for r in 0..t.nrows {
                for cc in 0..t.ncols {
                    let d = dst.add(r * n + cc);
                    let v = tp.add(r * nr + cc).read();
                    *d = if t.accum { (*d).acc(v) } else { v };
                }
            }
        }
    }
}

/// The row blocks `(first row, rows)` of an `m`-row product: whole
/// micro-panels of `mr` rows, at most `mc` rows each; with threads, a
/// multiple of `nthreads` of them, their panel counts differing by at
/// most one (equal shares: 1024 rows on 2 threads were 3 blocks of 182
/// rows against 2 and one of 114).
fn row_blocks(m: usize, mr: usize, mc: usize, nthreads: usize) -> Vec<(usize, usize)> {
    let panels = m.div_ceil(mr);
    let per = (mc / mr).max(1);
    let nblocks = if nthreads > 1 {
        panels.div_ceil(per).div_ceil(nthreads) * nthreads
    } else {
        panels.div_ceil(per)
    }
    .min(panels);
    // Boundary `i` is panel `⌊panels·i / nblocks⌋ ≤ panels` (the product
    // in u128: no size can overflow it), row `min(that·mr, m) ≤ m`.
    let bound = |i: usize| {
        let p = (panels as u128 * i as u128 / nblocks.max(1) as u128) as usize;
        p.saturating_mul(mr).min(m)
    };
    (0..nblocks)
        .map(|i| (bound(i), bound(i + 1) - bound(i)))
        .filter(|&(_, rows)| rows > 0)
        .collect()
}

/// What the blocked driver needs to know of one GEMM family (f32 with
/// narrow floats widened, or the integer kernels at i32/i64): the element
/// type, the kernels, the block sizes, the packing and the packing buffers.
pub(crate) trait Family: Sync {
    /// The packed operands' and C's element type.
    type E: GemmElem;
    /// An operand as the packers read it.
    type Src: Sync;
    /// The product's kernels (see [`tile_into_c`]).
    fn kernels(&self) -> Kernels<'_>;
    /// `(KC, MC, NC)`: the contraction block in steps of k, the row and
    /// column blocks (rounded up to whole tiles by the driver).
    fn blocks(&self) -> (usize, usize, usize);
    /// Packed k-slots for `kc` steps of k (two steps per slot for the
    /// integer pair kernel).
    fn slots(&self, kc: usize) -> usize;
    /// Pack rows `row0..row0 + mr` (zero past `m`) × k `pc..pc + kc` of A
    /// into `dst[s·mr + r]`, all `slots(kc)·mr` of them written.
    ///
    /// # Safety
    /// `a` must be readable over rows `row0..m` and k `pc..pc + kc`.
    #[allow(clippy::too_many_arguments)]
    // SAFETY: (contract) met by `blocked` and `matmul::streamed`.
    unsafe fn pack_a(
        &self,
        a: &Self::Src,
        pc: usize,
        kc: usize,
        row0: usize,
        mr: usize,
        m: usize,
        dst: &mut [Self::E],
    );
    /// Pack k `pc..pc + kc` × columns `col0..col0 + nr` (zero past `n`) of
    /// B into `dst[s·nr + c]`, all `slots(kc)·nr` of them written.
    ///
    /// # Safety
    /// `b` must be readable over k `pc..pc + kc` and columns `col0..n`.
    #[allow(clippy::too_many_arguments)]
    // SAFETY: (contract) met by `blocked` and `matmul::streamed`.
    unsafe fn pack_b(
        &self,
        b: &Self::Src,
        pc: usize,
        kc: usize,
        col0: usize,
        nr: usize,
        n: usize,
        dst: &mut [Self::E],
    );
    /// The packed-B buffer for one call (a family may keep it per thread).
    fn take_b(&self) -> Vec<Self::E>;
    /// `need` elements of `buf` for one packed B block (contents lost when
    /// it grows).
    fn b_block<'a>(&self, buf: &'a mut Vec<Self::E>, need: usize) -> &'a mut [Self::E];
    /// Return the buffer of [`Family::take_b`].
    fn give_b(&self, buf: Vec<Self::E>);
    /// A packed-A buffer of at least `len` elements (contents unspecified).
    fn take_a(&self, len: usize) -> Vec<Self::E>;
    /// Return the buffer of [`Family::take_a`].
    fn give_a(&self, buf: Vec<Self::E>);
    /// B's panels for the K-block of `kc` steps at `pc` and the column
    /// block at `jc` (`nc` columns), already packed in [`Family::pack_b`]'s layout and
    /// order (panel `q` at `q·slots·nr`), when the family holds B packed
    /// once; `None` packs them per call.
    fn packed_b_block(&self, _pc: usize, _kc: usize, _jc: usize, _nc: usize) -> Option<&[Self::E]> {
        None
    }
}

/// `C[m×n] = A[m×k] · B[k×n]` (C row-major, leading dimension `n`), in the
/// BLIS order: `jc` (NC columns, B block in L3) → `pc` (KC of the
/// contraction, pack B) → `ic` (MC rows, pack A into L2, split across the
/// rayon pool when `par`) → `jr` → `ir` (micro-tile). Each element of C
/// sums its K-blocks in order, whatever the thread split: results do not
/// depend on `par`.
///
/// # Safety
/// `m, n, k ≥ 1`; `a`, `b` readable as [`Family::pack_a`] and
/// [`Family::pack_b`] need for rows `0..m`, k `0..k`, columns `0..n`; `c`
/// valid for writes of `m·n` elements (aligned for `F::E`) that no one else
/// touches during the call; the kernels' tile fits [`TILE_MAX`].
// SAFETY: (contract) met by `matmul::sgemm` and `matmul_int::batched`.
pub(crate) unsafe fn blocked<F: Family>(
    f: &F,
    (m, n, k): (usize, usize, usize),
    a: &F::Src,
    b: &F::Src,
    c: *mut F::E,
    par: bool,
) {
    let kern = f.kernels();
    let (mr, nr) = (kern.full.mr, kern.full.nr);
    let (kc_, mc_, nc_) = f.blocks();
    let (mc_, nc_) = (mc_.div_ceil(mr) * mr, nc_.div_ceil(nr) * nr);
    let nthreads = if par {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    let blocks = row_blocks(m, mr, mc_, nthreads);
    let cp = SendPtr(c);
    let mut bp = f.take_b();
    for jc in (0..n).step_by(nc_) {
        let nc = nc_.min(n - jc);
        let npanels = nc.div_ceil(nr);
        for pc in (0..k).step_by(kc_) {
            let kc = kc_.min(k - pc);
            let ks = f.slots(kc);
            let bpr: &[F::E] = match f.packed_b_block(pc, kc, jc, nc) {
                // Checked, not trusted: the tiles below index `npanels`
                // panels of `ks·nr`.
                Some(pre) if pre.len() >= npanels * ks * nr => pre,
                _ => {
                    // Pack B[pc.., jc..] into NR-wide panels; each fully written.
                    let bpk = f.b_block(&mut bp, npanels * ks * nr);
                    // SAFETY: k `pc..pc + kc ⊆ 0..k` and columns from `jc +
                    // q·nr < n` of B, readable by the contract; each chunk
                    // is one panel.
                    let pack = |q: usize, d: &mut [F::E]| unsafe {
                        f.pack_b(b, pc, kc, jc + q * nr, nr, n, d)
                    };
                    if par && npanels > 1 {
                        bpk.par_chunks_mut(ks * nr)
                            .enumerate()
                            .for_each(|(q, d)| pack(q, d));
                    } else {
                        bpk.chunks_mut(ks * nr)
                            .enumerate()
                            .for_each(|(q, d)| pack(q, d));
                    }
                    &*bpk
                }
            };
            let accum = pc > 0;
            let do_block = |(ic, mcb): (usize, usize)| {
                let c = cp;
                let mpanels = mcb.div_ceil(mr);
                let mut ap = f.take_a(mpanels * ks * mr);
                for p in 0..mpanels {
                    let dst = &mut ap[p * ks * mr..(p + 1) * ks * mr];
                    // SAFETY: rows from `ic + p·mr < m`, k `pc..pc + kc ⊆
                    // 0..k` of A, readable by the contract.
                    unsafe { f.pack_a(a, pc, kc, ic + p * mr, mr, m, dst) };
                }
                for q in 0..npanels {
                    let col0 = jc + q * nr;
                    let ncols = nr.min(n - col0);
                    for p in 0..mpanels {
                        let row0 = ic + p * mr;
                        // B panel `q` is the `ks·nr` elements at `q·ks·nr` of
                        // `bpr` (`npanels·ks·nr`), A panel `p` the `ks·mr` at
                        // `p·ks·mr` of `ap` (≥ `mpanels·ks·mr`); `row0 < m`.
                        // SAFETY: so `tile_into_c`'s contract holds; this task
                        // alone writes C's rows of its block `ic..ic + mcb`.
                        unsafe {
                            let t = Tile {
                                kc: ks,
                                row0,
                                col0,
                                nrows: mr.min(m - row0),
                                ncols,
                                accum,
                                a: ap.as_ptr().add(p * ks * mr),
                                lda: 0,
                                b: bpr.as_ptr().add(q * ks * nr),
                            };
                            tile_into_c(&kern, &t, (m, n), c.0);
                        }
                    }
                }
                f.give_a(ap);
            };
            if par && blocks.len() > 1 {
                blocks.par_iter().for_each(|&b| do_block(b));
            } else {
                blocks.iter().for_each(|&b| do_block(b));
            }
        }
    }
    f.give_b(bp);
}

#[cfg(test)]
mod tests {
    use super::Cols;

    /// Every column count of a tile has exactly one kernel variant, the
    /// one `Cols::ragged` picks for a ragged panel (AVX-512 and AVX2
    /// widths).
    #[test]
    fn each_column_count_fits_one_variant() {
        for nr in [16usize, 32] {
            for ncols in 1..=nr {
                let fit: Vec<Cols> = [Cols::Whole, Cols::One, Cols::Two]
                    .into_iter()
                    .filter(|c| c.fits(ncols, nr))
                    .collect();
                let want = if ncols == nr {
                    vec![Cols::Whole, Cols::Two]
                } else {
                    vec![Cols::ragged(ncols, nr)]
                };
                assert_eq!(fit, want, "nr={nr} ncols={ncols}");
            }
            assert!(!Cols::One.fits(0, nr) && !Cols::Two.fits(nr + 1, nr));
        }
    }
}
