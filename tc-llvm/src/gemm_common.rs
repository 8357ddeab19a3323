//! What the float GEMM ([`crate::matmul`]) and the integer GEMM
//! ([`crate::matmul_int`]) share: the register-tile micro-kernel emitter
//! and the batched matmul shape rule with its checked element counts. It
//! sits below both so neither imports the other's internals (issue #14: no
//! import cycles between files).

use crate::Error;

/// What differs between the register-tile micro-kernels (f32 here, the
/// integer ones in [`crate::matmul_int`]); [`ukernel_text`] emits the
/// rest, which they share: the signature
/// `ukr(kc, packed A, packed B, C, ldc, accumulate)`, `2·mr` accumulator
/// vectors `%acc{i}_{j}` of `vw` lanes, per step of k two B vectors
/// `%b{j}` and `mr` broadcasts `%as{i}` of A, and at the end C loaded,
/// added (when accumulating) and stored, `ldc` elements per row.
pub(crate) struct UkrSpec<'a> {
    /// Element type (`float`, `i32`, `i64`).
    pub elem: &'a str,
    /// Lanes per vector (NR = 2·vw).
    pub vw: usize,
    /// Rows of the tile.
    pub mr: usize,
    /// Floats per k step of the packed A panel (≥ `mr`: an edge kernel
    /// computes the first `mr` rows of a panel packed `a_stride` wide).
    pub a_stride: usize,
    /// Declarations before the function.
    pub decls: String,
    /// Extra instructions after `%b{j}` is loaded.
    pub after_b: &'a dyn Fn(usize) -> String,
    /// Extra instructions after `%as{i}` is broadcast.
    pub after_a: &'a dyn Fn(usize) -> String,
    /// Instructions defining `%n{i}_{j}` from `%acc{i}_{j}`, `%as{i}`, `%b{j}`.
    pub step: &'a dyn Fn(usize, usize) -> String,
    /// The add of the accumulate path (`fadd`, `add`).
    pub add: &'a str,
    /// Alignment promised for C's loads and stores.
    pub c_align: usize,
}

/// The IR text of a micro-kernel (see [`UkrSpec`]), with the host
/// attributes of [`crate::jit::attributes`].
pub(crate) fn ukernel_text(k: &UkrSpec) -> String {
    let (e, vw, mr, ast) = (k.elem, k.vw, k.mr, k.a_stride);
    let nr = 2 * vw;
    let v = format!("<{vw} x {e}>");
    let mut s = k.decls.clone();
    s.push_str(&format!(
        "define void @ukr(i64 %kc, {e}* noalias nocapture readonly %a, {e}* noalias nocapture readonly %b, {e}* noalias nocapture %c, i64 %ldc, i64 %accum) #0 {{\nentry:\n  br label %loop\nloop:\n  %k = phi i64 [0, %entry], [%k1, %loop]\n"
    ));
    for i in 0..mr {
        for j in 0..2 {
            s.push_str(&format!(
                "  %acc{i}_{j} = phi {v} [zeroinitializer, %entry], [%n{i}_{j}, %loop]\n"
            ));
        }
    }
    s.push_str(&format!("  %bo = mul i64 %k, {nr}\n"));
    for j in 0..2 {
        s.push_str(&format!(
            "  %bo{j} = add i64 %bo, {}\n  %bp{j} = getelementptr inbounds {e}, {e}* %b, i64 %bo{j}\n  %bq{j} = bitcast {e}* %bp{j} to {v}*\n  %b{j} = load {v}, {v}* %bq{j}, align 4\n",
            j * vw
        ));
        s.push_str(&(k.after_b)(j));
    }
    s.push_str(&format!("  %ao = mul i64 %k, {ast}\n"));
    for i in 0..mr {
        s.push_str(&format!(
            "  %ao{i} = add i64 %ao, {i}\n  %ap{i} = getelementptr inbounds {e}, {e}* %a, i64 %ao{i}\n  %a{i} = load {e}, {e}* %ap{i}, align 4\n  %ai{i} = insertelement {v} undef, {e} %a{i}, i32 0\n  %as{i} = shufflevector {v} %ai{i}, {v} undef, <{vw} x i32> zeroinitializer\n"
        ));
        s.push_str(&(k.after_a)(i));
        for j in 0..2 {
            s.push_str(&(k.step)(i, j));
        }
    }
    s.push_str("  %k1 = add nuw nsw i64 %k, 1\n  %cc = icmp ult i64 %k1, %kc\n  br i1 %cc, label %loop, label %done\ndone:\n  %ac = icmp ne i64 %accum, 0\n");
    let (add, al) = (k.add, k.c_align);
    for i in 0..mr {
        for j in 0..2 {
            s.push_str(&format!(
                "  %ro{i}_{j} = mul i64 %ldc, {i}\n  %co{i}_{j} = add i64 %ro{i}_{j}, {}\n  %cp{i}_{j} = getelementptr inbounds {e}, {e}* %c, i64 %co{i}_{j}\n  %cq{i}_{j} = bitcast {e}* %cp{i}_{j} to {v}*\n  %old{i}_{j} = load {v}, {v}* %cq{i}_{j}, align {al}\n  %sum{i}_{j} = {add} {v} %old{i}_{j}, %n{i}_{j}\n  %res{i}_{j} = select i1 %ac, {v} %sum{i}_{j}, {v} %n{i}_{j}\n  store {v} %res{i}_{j}, {v}* %cq{i}_{j}, align {al}\n",
                j * vw
            ));
        }
    }
    s.push_str("  ret void\n}\n\n");
    s.push_str(&crate::jit::attributes());
    s
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
