//! Reduction kernels (Section 4 §5.5) and argmax/argmin: the row form (one
//! output element at a time along the contiguous last axis) and the column
//! form (a kept last axis as the inner vectorized loop), folding in the
//! interpreter's sequential order.

use super::*;

impl<'a> Gen<'a> {
    pub(super) fn reduce_body(
        &mut self,
        out: Value,
        rop: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        x: Value,
    ) {
        let (o, l) = self.loop_begin("%start", "%end");
        self.reduce_row(out, rop, axes, keepdims, x, &o);
        self.loop_end(l);
    }

    /// The column block of a reduction that keeps its operand's last axis
    /// ([`KernelShape::Cols`]), or `None` for the one-element-at-a-time
    /// form ([`KernelShape::Reduce`]: the last axis is reduced, or it has
    /// one element in a σ-specialised kernel, where the reduced axes are
    /// then contiguous). The shape-generic kernel takes the column form
    /// too, with [`COL_BLOCK`] (its dims are run-time values).
    pub(super) fn col_block(&self, axes: &[usize], x: Value) -> Option<usize> {
        let xs = &self.vals[x.0 as usize].shape;
        let r = xs.len();
        if r < 2 || axes.is_empty() || axes.contains(&(r - 1)) {
            return None;
        }
        if self.generic {
            return Some(COL_BLOCK);
        }
        let d = xs[r - 1];
        if d == 1 {
            return None;
        }
        if d == 0 {
            return Some(COL_BLOCK);
        }
        // Blocks of equal width (a multiple of 16 columns), so no tile is a
        // short tail. Threads split tiles (output rows × blocks), so a
        // single-row reduction of ≤ COL_BLOCK columns runs on one thread:
        // narrower blocks for more tiles were measured slower, on one
        // thread and on two (each row of `x` is then read in several
        // strided passes, and the fold is memory-bound either way).
        let nb = d.div_ceil(COL_BLOCK);
        if nb <= 1 {
            return Some(d);
        }
        Some((d.div_ceil(nb).div_ceil(16) * 16).min(d))
    }

    /// A reduction that keeps the last axis of its operand `x` (e.g. a sum
    /// over axis 0 of `[R, C]`, or over axis 1 of `[A, B, C]`), in the
    /// column form ([`KernelShape::Cols`]): per tile (an output row `o` and
    /// columns `jlo..jlo+n` of it, `n ≤ block`)
    ///
    /// ```text
    /// acc[0..n] = identity
    /// for each reduced index r (the axes in order, as the interpreter):
    ///     for j in 0..n:  acc[j] = acc[j] op f(x[o…, r…, jlo + j])
    /// out[o, jlo + j] = finish(acc[j])  (mean's division, rounding into the dtype)
    /// ```
    ///
    /// The inner loop walks the contiguous last axis of `x` and of the
    /// output: it vectorizes (one vector lane per output element), where
    /// the element-at-a-time form walks `x` with a stride. The fused
    /// producer `f` is computed inside the inner loop, as in every
    /// reduction kernel. `acc` is a stack row in the computation type
    /// (narrow floats accumulate in f32 and are rounded once at the end,
    /// ints wrap in their width, Bool in a byte), so the output buffer
    /// never holds a partial result.
    ///
    /// Order (Section 4 §5.5, §6): each output element is still folded
    /// sequentially over the reduced indices, in the row-major order of
    /// `axes` — the interpreter's order, and the element-at-a-time form's
    /// in deterministic mode — so results are bit-identical to both and
    /// deterministic mode stays deterministic. Vectorizing across output
    /// elements reassociates nothing, so this form needs no `reassoc` flag
    /// and is sequential in every mode (outside deterministic mode the
    /// element-at-a-time form may reassociate a float fold, which §6
    /// allows; this one does not). Threads split tiles, never a fold: the
    /// result does not depend on the thread count or the block width.
    pub(super) fn reduce_cols(
        &mut self,
        out: Value,
        rop: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        x: Value,
        block: usize,
    ) {
        let dt = self.vals[x.0 as usize].dtype;
        let keyed = self.reduce_keyed(rop, dt);
        let ty = if keyed { "i32" } else { cty(dt) };
        // Accumulator row in memory: Bool as bytes (an `i1` array does not vectorize).
        let mty = if ty == "i1" { "i8" } else { ty };
        let nan_tracked = dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min);
        let a = self.label();
        let arr = format!("[{block} x {mty}]");
        let _ = writeln!(self.pre, "  %acc{a} = alloca {arr}, align 64");
        let narr = format!("[{block} x i8]");
        if nan_tracked {
            let _ = writeln!(self.pre, "  %nan{a} = alloca {narr}, align 64");
        }
        let ro = self.vals[out.0 as usize].shape.len();
        let rx = self.vals[x.0 as usize].shape.len();
        let d = self.dim(out, ro - 1);
        let (t, lt) = self.loop_begin("%start", "%end");
        let (o, jlo, n) = self.cols_tile(&t, &d, block);
        let mut src = self.cols_src(out, x, &o, axes, keepdims);
        let elem = |g: &mut Self, base: &str, ty: &str, j: &str| -> String {
            g.ins(format!(
                "getelementptr inbounds [{block} x {ty}], [{block} x {ty}]* {base}{a}, i64 0, i64 {j}"
            ))
        };
        // acc[0..n] = identity.
        let init = self.reduce_init(rop, dt, keyed);
        let init = if mty != ty {
            if init == "true" { "1" } else { "0" }.to_string()
        } else {
            init
        };
        let (j, lj) = self.loop_begin("0", &n);
        let p = elem(self, "%acc", mty, &j);
        self.e(format!("store {mty} {init}, {mty}* {p}"));
        if nan_tracked {
            let q = elem(self, "%nan", "i8", &j);
            self.e(format!("store i8 0, i8* {q}"));
        }
        self.loop_end(lj);
        // The reduced axes, then the columns.
        let mut ls = Vec::new();
        for &ax in axes {
            let dax = self.dim(x, ax);
            let (iv, li) = self.loop_begin("0", &dax);
            src[ax] = iv;
            ls.push(li);
        }
        let (j, lj) = self.loop_begin("0", &n);
        src[rx - 1] = self.badd(&jlo, &j);
        let e = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        let p = elem(self, "%acc", mty, &j);
        let raw = self.ins(format!("load {mty}, {mty}* {p}"));
        let acc = if mty != ty {
            self.ins(format!("trunc {mty} {raw} to {ty}"))
        } else {
            raw
        };
        // Sequential per output element in every mode: no reassociation flags.
        let (nacc, isn) = self.reduce_combine(rop, dt, keyed, &acc, &e, "");
        if let Some(isn) = isn {
            let q = elem(self, "%nan", "i8", &j);
            let old = self.ins(format!("load i8, i8* {q}"));
            let z = self.ins(format!("zext i1 {isn} to i8"));
            let nn = self.ins(format!("or i8 {old}, {z}"));
            self.e(format!("store i8 {nn}, i8* {q}"));
        }
        let nacc = if mty != ty {
            self.ins(format!("zext {ty} {nacc} to {mty}"))
        } else {
            nacc
        };
        self.e(format!("store {mty} {nacc}, {mty}* {p}"));
        self.loop_end(lj);
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        // out[o, jlo + j] = finish(acc[j]).
        let row = self.bmul(&o, &d);
        let base = self.badd(&row, &jlo);
        let (j, lj) = self.loop_begin("0", &n);
        let p = elem(self, "%acc", mty, &j);
        let raw = self.ins(format!("load {mty}, {mty}* {p}"));
        let res = if mty != ty {
            self.ins(format!("trunc {mty} {raw} to {ty}"))
        } else {
            raw
        };
        let nan = if nan_tracked {
            let q = elem(self, "%nan", "i8", &j);
            let f = self.ins(format!("load i8, i8* {q}"));
            Some(self.ins(format!("icmp ne i8 {f}, 0")))
        } else {
            None
        };
        let res = self.reduce_finish(rop, dt, keyed, &res, nan.as_deref(), x, axes);
        let off = self.badd(&base, &j);
        self.store(out, &off, &res);
        self.loop_end(lj);
        self.loop_end(lt);
    }

    /// The column form's tile `t`: output row `o`, first column `jlo` and
    /// column count `n` (≤ `block`; the last tile of a row may be short).
    fn cols_tile(&mut self, t: &str, d: &str, block: usize) -> (String, String, String) {
        let bl = block.to_string();
        // Blocks per output row.
        let nb = match is_lit(d) {
            Some(dv) => (dv.max(0) as usize).div_ceil(block.max(1)).to_string(),
            None => {
                let t = self.pins(format!("add i64 {d}, {}", block - 1));
                self.pins(format!("udiv i64 {t}, {bl}"))
            }
        };
        let (o, jlo) = if is_lit(&nb) == Some(1) {
            (t.to_string(), "0".to_string())
        } else {
            let o = self.ins(format!("udiv i64 {t}, {nb}"));
            let b = self.ins(format!("urem i64 {t}, {nb}"));
            let jlo = self.bmul(&b, &bl);
            (o, jlo)
        };
        let n = match (is_lit(d), is_lit(&nb)) {
            (Some(dv), Some(1)) => dv.to_string(),
            // Checked: an empty output may have a last dim near i64::MAX.
            (Some(dv), Some(nbv)) if nbv.checked_mul(block as i64) == Some(dv) => bl.clone(),
            _ => {
                let rem = self.bsub(d, &jlo);
                let c = self.ins(format!("icmp slt i64 {rem}, {bl}"));
                self.ins(format!("select i1 {c}, i64 {rem}, i64 {bl}"))
            }
        };
        (o, jlo, n)
    }

    /// The operand index of output row `o` (every output dim but the last)
    /// with the reduced axes left empty for their loops.
    fn cols_src(
        &mut self,
        out: Value,
        x: Value,
        o: &str,
        axes: &[usize],
        keepdims: bool,
    ) -> Vec<String> {
        let ro = self.vals[out.0 as usize].shape.len();
        let rx = self.vals[x.0 as usize].shape.len();
        let mut od = vec![String::new(); ro];
        let mut rest = o.to_string();
        for k in (0..ro - 1).rev() {
            let dk = self.dim(out, k);
            if k == 0 {
                od[k] = rest.clone();
            } else if is_lit(&dk) == Some(1) {
                od[k] = "0".into();
            } else {
                od[k] = self.ins(format!("urem i64 {rest}, {dk}"));
                rest = self.ins(format!("udiv i64 {rest}, {dk}"));
            }
        }
        let mut src = vec![String::new(); rx];
        let mut k = 0;
        for (ax, s) in src.iter_mut().enumerate() {
            if axes.contains(&ax) {
                if keepdims {
                    k += 1;
                }
                continue;
            }
            *s = od[k].clone();
            k += 1;
        }
        src
    }

    /// Output element `o` of a reduction.
    pub(super) fn reduce_row(
        &mut self,
        out: Value,
        rop: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        x: Value,
        o: &str,
    ) {
        let dt = self.vals[x.0 as usize].dtype;
        let ty = cty(dt);
        let o = o.to_string();
        let mut src = self.out_to_in(out, x, axes, keepdims, &o);
        let a = self.label();
        let keyed = self.reduce_keyed(rop, dt);
        let ty = if keyed { "i32" } else { ty };
        let _ = writeln!(self.pre, "  %acc{a} = alloca {ty}, align 8");
        let _ = writeln!(self.pre, "  %nan{a} = alloca i1, align 1");
        let init = self.reduce_init(rop, dt, keyed);
        self.e(format!("store {ty} {init}, {ty}* %acc{a}"));
        self.e(format!("store i1 false, i1* %nan{a}"));
        let mut ls = Vec::new();
        for &ax in axes {
            let d = self.dim(x, ax);
            let (iv, li) = self.loop_begin("0", &d);
            src[ax] = iv;
            ls.push(li);
        }
        let e = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        if let Some((sx, m)) = self.stash {
            if sx == x.0 {
                let off = self.ravel(m, &src);
                self.store(m, &off, &e);
            }
        }
        let acc = self.ins(format!("load {ty}, {ty}* %acc{a}"));
        // Deterministic mode: the interpreter's sequential order (no reassociation).
        let ra = if self.opts.deterministic {
            ""
        } else {
            "reassoc "
        };
        let (nacc, isn) = self.reduce_combine(rop, dt, keyed, &acc, &e, ra);
        if let Some(isn) = isn {
            let old = self.ins(format!("load i1, i1* %nan{a}"));
            let nn = self.ins(format!("or i1 {old}, {isn}"));
            self.e(format!("store i1 {nn}, i1* %nan{a}"));
        }
        self.e(format!("store {ty} {nacc}, {ty}* %acc{a}"));
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        let res = self.ins(format!("load {ty}, {ty}* %acc{a}"));
        let nan = if dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min) {
            Some(self.ins(format!("load i1, i1* %nan{a}")))
        } else {
            None
        };
        let res = self.reduce_finish(rop, dt, keyed, &res, nan.as_deref(), x, axes);
        self.store(out, &o, &res);
    }

    /// Float max/min, in every mode: an integer max/min over
    /// order-preserving keys of the bits. On non-NaN values that is exactly
    /// IEEE 754-2019 `maximum`/`minimum` (the key order has −0 < +0,
    /// Section 2 §3), it is associative and commutative, so any fold order
    /// (vectorized, sequential, per thread) gives the same bits, and it
    /// vectorizes without fast-math flags. NaN is tracked separately and
    /// becomes the canonical NaN at the end, as in the interpreter.
    pub(super) fn reduce_keyed(&self, rop: ReduceOp, dt: Dtype) -> bool {
        dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min)
    }

    /// The identity of `rop` at `dt`, in the accumulator type (`i32` keys
    /// when `keyed`).
    pub(super) fn reduce_init(&mut self, rop: ReduceOp, dt: Dtype, keyed: bool) -> String {
        match (rop, dt.is_float()) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => self.fc(0.0),
            (ReduceOp::Prod, true) => self.fc(1.0),
            (ReduceOp::Max, true) if keyed => float_key(f32::NEG_INFINITY).to_string(),
            (ReduceOp::Min, true) if keyed => float_key(f32::INFINITY).to_string(),
            (ReduceOp::Max, true) => self.fc(f32::NEG_INFINITY),
            (ReduceOp::Min, true) => self.fc(f32::INFINITY),
            (ReduceOp::Sum, false) => "0".into(),
            (ReduceOp::Prod, false) => "1".into(),
            (ReduceOp::Max, false) => int_min(dt).to_string(),
            (ReduceOp::Min, false) => int_max(dt).to_string(),
            (ReduceOp::Any, _) => "false".into(),
            (ReduceOp::All, _) => "true".into(),
            (ReduceOp::Mean, false) => "0".into(),
        }
    }

    /// One step `acc op e` of a reduction over elements of dtype `dt`
    /// (`ra`: fast-math flags of the float add/mul). Returns the new
    /// accumulator and, for float max/min, the `i1` "e is NaN" that the
    /// caller ORs into its NaN flag.
    pub(super) fn reduce_combine(
        &mut self,
        rop: ReduceOp,
        dt: Dtype,
        keyed: bool,
        acc: &str,
        e: &str,
        ra: &str,
    ) -> (String, Option<String>) {
        let ty = cty(dt);
        match (rop, dt.is_float()) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => {
                (self.ins(format!("fadd {ra}float {acc}, {e}")), None)
            }
            (ReduceOp::Prod, true) => (self.ins(format!("fmul {ra}float {acc}, {e}")), None),
            (ReduceOp::Max | ReduceOp::Min, true) if keyed => {
                let b = self.ins(format!("bitcast float {e} to i32"));
                let sgn = self.ins(format!("ashr i32 {b}, 31"));
                let msk = self.ins(format!("and i32 {sgn}, 2147483647"));
                let key = self.ins(format!("xor i32 {b}, {msk}"));
                let cmp = if rop == ReduceOp::Max { "sgt" } else { "slt" };
                let c = self.ins(format!("icmp {cmp} i32 {key}, {acc}"));
                let m = self.ins(format!("select i1 {c}, i32 {key}, i32 {acc}"));
                let isn = self.ins(format!("fcmp uno float {e}, {e}"));
                (m, Some(isn))
            }
            (ReduceOp::Max | ReduceOp::Min, true) => {
                // Not reached (float max/min are keyed); kept total.
                let m = self.extremum(rop == ReduceOp::Max, acc, e);
                let isn = self.ins(format!("fcmp uno float {e}, {e}"));
                (m, Some(isn))
            }
            (ReduceOp::Sum | ReduceOp::Mean, false) => {
                (self.ins(format!("add {ty} {acc}, {e}")), None)
            }
            (ReduceOp::Prod, false) => (self.ins(format!("mul {ty} {acc}, {e}")), None),
            (ReduceOp::Max, false) => {
                let c = self.ins(format!("icmp sgt {ty} {e}, {acc}"));
                (
                    self.ins(format!("select i1 {c}, {ty} {e}, {ty} {acc}")),
                    None,
                )
            }
            (ReduceOp::Min, false) => {
                let c = self.ins(format!("icmp slt {ty} {e}, {acc}"));
                (
                    self.ins(format!("select i1 {c}, {ty} {e}, {ty} {acc}")),
                    None,
                )
            }
            (ReduceOp::Any, _) => (self.ins(format!("or i1 {acc}, {e}")), None),
            (ReduceOp::All, _) => (self.ins(format!("and i1 {acc}, {e}")), None),
        }
    }

    /// The result of a reduction from its final accumulator `res` (and,
    /// for float max/min, the `i1` NaN flag): keys decoded, NaN restored,
    /// mean's division by the count of reduced elements, rounding into `dt`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_finish(
        &mut self,
        rop: ReduceOp,
        dt: Dtype,
        keyed: bool,
        res: &str,
        nan: Option<&str>,
        x: Value,
        axes: &[usize],
    ) -> String {
        let mut res = res.to_string();
        if keyed {
            // The key map is an involution: key(key(b)) = b.
            let sgn = self.ins(format!("ashr i32 {res}, 31"));
            let msk = self.ins(format!("and i32 {sgn}, 2147483647"));
            let b = self.ins(format!("xor i32 {res}, {msk}"));
            res = self.ins(format!("bitcast i32 {b} to float"));
        }
        if dt.is_float() {
            if let Some(nn) = nan {
                let nanc = self.fc(f32::NAN);
                res = self.ins(format!("select i1 {nn}, float {nanc}, float {res}"));
            }
            if rop == ReduceOp::Mean {
                let mut cnt = "1".to_string();
                for &ax in axes {
                    let d = self.dim(x, ax);
                    cnt = self.pmul(&cnt, &d);
                }
                let c = self.ins(format!("sitofp i64 {cnt} to float"));
                res = self.fop("fdiv", &res, &c);
            }
            // A reduction's NaN is the canonical one, whichever element
            // (or fold order) produced it (Section 2 §3, as the interpreter).
            let canon = self.fc(cast::CANONICAL_NAN);
            let isn = self.ins(format!("fcmp uno float {res}, {res}"));
            res = self.ins(format!("select i1 {isn}, float {canon}, float {res}"));
            res = self.round(dt, &res);
        } else if dt == Dtype::I4 {
            res = self.round(dt, &res);
        }
        res
    }

    pub(super) fn argreduce_body(
        &mut self,
        out: Value,
        max: bool,
        axis: usize,
        keepdims: bool,
        x: Value,
    ) {
        let dt = self.vals[x.0 as usize].dtype;
        let ty = cty(dt);
        let (o, l) = self.loop_begin("%start", "%end");
        let mut src = self.out_to_in(out, x, &[axis], keepdims, &o);
        let a = self.label();
        let _ = writeln!(self.pre, "  %bv{a} = alloca {ty}, align 8");
        let _ = writeln!(self.pre, "  %bi{a} = alloca i64, align 8");
        src[axis] = "0".into();
        let first = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        self.e(format!("store {ty} {first}, {ty}* %bv{a}"));
        self.e(format!("store i64 0, i64* %bi{a}"));
        let d = self.dim(x, axis);
        let (iv, li) = self.loop_begin("1", &d);
        src[axis] = iv.clone();
        let e = self.val(
            x,
            &Idx {
                dims: Some(src),
                lin: None,
            },
        );
        let bv = self.ins(format!("load {ty}, {ty}* %bv{a}"));
        // Ties keep the first index; NaN beats every number (first NaN wins).
        let better = if dt.is_float() {
            let bnan = self.ins(format!("fcmp uno float {bv}, {bv}"));
            let enan = self.ins(format!("fcmp uno float {e}, {e}"));
            let cmp = if max { "ogt" } else { "olt" };
            let c = self.ins(format!("fcmp {cmp} float {e}, {bv}"));
            let c1 = self.ins(format!("or i1 {enan}, {c}"));
            self.ins(format!("select i1 {bnan}, i1 false, i1 {c1}"))
        } else if dt.is_bool() {
            let cmp = if max { "ugt" } else { "ult" };
            self.ins(format!("icmp {cmp} i1 {e}, {bv}"))
        } else {
            let cmp = if max { "sgt" } else { "slt" };
            self.ins(format!("icmp {cmp} {ty} {e}, {bv}"))
        };
        let nbv = self.ins(format!("select i1 {better}, {ty} {e}, {ty} {bv}"));
        self.e(format!("store {ty} {nbv}, {ty}* %bv{a}"));
        let bi = self.ins(format!("load i64, i64* %bi{a}"));
        let nbi = self.ins(format!("select i1 {better}, i64 {iv}, i64 {bi}"));
        self.e(format!("store i64 {nbi}, i64* %bi{a}"));
        self.loop_end(li);
        let r = self.ins(format!("load i64, i64* %bi{a}"));
        self.store(out, &o, &r);
        self.loop_end(l);
    }
}
