//! Reduction kernels (Section 4 §5.5) and argmax/argmin: the row form (one
//! output element at a time along the contiguous last axis) and the column
//! form (a kept last axis as the inner vectorized loop), folding in the
//! interpreter's sequential order, or for a float sum outside deterministic
//! mode in the lane order ([`LANES`]).

use super::*;

/// The accumulators of a float sum outside deterministic mode (`fold_lanes`):
/// one 512-bit vector of f32, two 256-bit ones.
pub(crate) const LANES: usize = 16;

impl<'a> Gen<'a> {
    pub(super) fn reduce_body(
        &mut self,
        out: Value,
        rop: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        x: Value,
    ) {
        let (o, l) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
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
        let xs = &self.vals[x].shape;
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
        let dt = self.vals[x].dtype;
        let keyed = self.reduce_keyed(rop, dt);
        let ty = if keyed { Ty::I32 } else { Ty::compute(dt) };
        // Accumulator row in memory: Bool as bytes (an `i1` array does not vectorize).
        let mty = if ty == Ty::I1 { Ty::I8 } else { ty };
        let nan_tracked = dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min);
        let a = self.label();
        self.b
            .entry_line(&format!("%acc{a} = alloca [{block} x {mty}], align 64"));
        if nan_tracked {
            self.b
                .entry_line(&format!("%nan{a} = alloca [{block} x i8], align 64"));
        }
        let ro = self.vals[out].shape.len();
        let rx = self.vals[x].shape.len();
        let d = self.dim(out, ro - 1);
        let (t, lt) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
        let (o, jlo, n) = self.cols_tile(&t, &d, block);
        let mut src = self.cols_src(out, x, &o, axes, keepdims);
        // Element j of the row `%{base}{a}` (a `[block x ty]` alloca).
        let elem = |g: &mut Self, base: &str, ty: Ty, j: &Q| -> V {
            g.b.def_text(
                ty.ptr(),
                format!("getelementptr inbounds [{block} x {ty}], [{block} x {ty}]* {base}{a}, i64 0, i64 {j}"),
            )
        };
        // acc[0..n] = identity.
        let init = self.reduce_init(rop, dt, keyed);
        let init = if mty != ty {
            V::int(mty, (init == V::bool(true)) as i64)
        } else {
            init
        };
        let (j, lj) = self.loop_begin(&Q::Lit(0), &n);
        let p = elem(self, "%acc", mty, &j);
        self.b.store(&init, &p);
        if nan_tracked {
            let q = elem(self, "%nan", Ty::I8, &j);
            self.b.store(&V::int(Ty::I8, 0), &q);
        }
        self.loop_end(lj);
        // The reduced axes, then the columns.
        let ls = self.reduced_loops(x, (axes, axes), &mut src);
        let (j, lj) = self.loop_begin(&Q::Lit(0), &n);
        src[rx - 1] = self.badd(&jlo, &j);
        let e = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        let p = elem(self, "%acc", mty, &j);
        let raw = self.b.load(&p);
        let acc = if mty != ty {
            self.b.trunc(&raw, ty)
        } else {
            raw
        };
        // Sequential per output element in every mode: no reassociation flags.
        let (nacc, isn) = self.reduce_combine(rop, dt, keyed, &acc, &e, "");
        if let Some(isn) = isn {
            let q = elem(self, "%nan", Ty::I8, &j);
            let old = self.b.load(&q);
            let z = self.b.zext(&isn, Ty::I8);
            let nn = self.b.or(&old, &z);
            self.b.store(&nn, &q);
        }
        let nacc = if mty != ty {
            self.b.zext(&nacc, mty)
        } else {
            nacc
        };
        self.b.store(&nacc, &p);
        self.loop_end(lj);
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        // out[o, jlo + j] = finish(acc[j]).
        let row = self.bmul(&o, &d);
        let base = self.badd(&row, &jlo);
        let (j, lj) = self.loop_begin(&Q::Lit(0), &n);
        let p = elem(self, "%acc", mty, &j);
        let raw = self.b.load(&p);
        let res = if mty != ty {
            self.b.trunc(&raw, ty)
        } else {
            raw
        };
        let nan = if nan_tracked {
            let q = elem(self, "%nan", Ty::I8, &j);
            let f = self.b.load(&q);
            Some(self.b.icmp("ne", &f, &V::int(Ty::I8, 0)))
        } else {
            None
        };
        let res = self.reduce_finish(rop, dt, keyed, &res, nan.as_ref(), x, axes);
        let off = self.badd(&base, &j);
        self.store(out, &off, &res);
        self.loop_end(lj);
        self.loop_end(lt);
    }

    /// The column form's tile `t`: output row `o`, first column `jlo` and
    /// column count `n` (≤ `block`; the last tile of a row may be short).
    fn cols_tile(&mut self, t: &Q, d: &Q, block: usize) -> (Q, Q, Q) {
        let bl = Q::Lit(block as i64);
        // Blocks per output row.
        let nb = match d.lit() {
            Some(dv) => Q::Lit((dv.max(0) as usize).div_ceil(block.max(1)) as i64),
            None => {
                let (d, bl) = (d.v(), bl.v());
                Q::of(&self.b.hoisted(|b| {
                    let t = b.add(&d, &V::int(Ty::I64, block as i64 - 1));
                    b.udiv(&t, &bl)
                }))
            }
        };
        let (o, jlo) = if nb.lit() == Some(1) {
            (t.clone(), Q::Lit(0))
        } else {
            let o = Q::of(&self.b.udiv(&t.v(), &nb.v()));
            let b = Q::of(&self.b.urem(&t.v(), &nb.v()));
            let jlo = self.bmul(&b, &bl);
            (o, jlo)
        };
        let n = match (d.lit(), nb.lit()) {
            (Some(dv), Some(1)) => Q::Lit(dv),
            // Checked: an empty output may have a last dim near i64::MAX.
            (Some(dv), Some(nbv)) if nbv.checked_mul(block as i64) == Some(dv) => bl.clone(),
            _ => {
                let (rem, bl) = (self.bsub(d, &jlo).v(), bl.v());
                let c = self.b.icmp("slt", &rem, &bl);
                Q::of(&self.b.select(&c, &rem, &bl))
            }
        };
        (o, jlo, n)
    }

    /// The operand index of output row `o` (every output dim but the last)
    /// with the reduced axes left empty for their loops.
    fn cols_src(&mut self, out: Value, x: Value, o: &Q, axes: &[usize], keepdims: bool) -> Vec<Q> {
        let ro = self.vals[out].shape.len();
        let rx = self.vals[x].shape.len();
        let mut od = vec![Q::Lit(0); ro];
        let mut rest = o.clone();
        for k in (0..ro - 1).rev() {
            let dk = self.dim(out, k);
            if k == 0 {
                od[k] = rest.clone();
            } else if dk.lit() == Some(1) {
                od[k] = Q::Lit(0);
            } else {
                (od[k], rest) = self.divmod(&rest, &dk);
            }
        }
        let mut src = vec![Q::Lit(0); rx];
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
        o: &Q,
    ) {
        let dt = self.vals[x].dtype;
        let o = o.clone();
        let mut src = self.out_to_in(out, x, axes, keepdims, &o);
        let keyed = self.reduce_keyed(rop, dt);
        let ty = if keyed { Ty::I32 } else { Ty::compute(dt) };
        // Products fold in the interpreter's order in every mode: a
        // reordered product's partial products overflow to ±inf (then
        // inf · 0 = NaN) where the in-order fold stays finite, and no error
        // bound covers that (crate docs).
        let lanes = !self.opts.deterministic
            && dt.is_float()
            && matches!(rop, ReduceOp::Sum | ReduceOp::Mean)
            && !axes.is_empty();
        let (res, nan) = if lanes {
            (self.fold_lanes(x, &mut src, axes, ty), None)
        } else {
            self.fold_in_order((rop, dt, keyed), x, &mut src, axes, ty)
        };
        let res = self.reduce_finish(rop, dt, keyed, &res, nan.as_ref(), x, axes);
        self.store(out, &o, &res);
    }

    /// Element `src` of a reduction's operand `x` (its fused producer
    /// computed here), also stored into the group member stashed from it.
    fn reduce_elem(&mut self, x: Value, src: &[Q]) -> V {
        let e = self.val(
            x,
            &Idx {
                dims: Some(src.to_vec()),
                lin: None,
            },
        );
        if let Some((sx, m)) = self.stash {
            if sx == x {
                let off = self.ravel(m, src);
                self.store(m, &off, &e);
            }
        }
        e
    }

    /// Open the loops over `loops` (axes of `x`, row-major), setting their
    /// indices in `src`; the outermost is bounded by [`Self::outer_bound`]
    /// over all the reduced axes `all`. The caller closes them, innermost
    /// first.
    fn reduced_loops(
        &mut self,
        x: Value,
        (loops, all): (&[usize], &[usize]),
        src: &mut [Q],
    ) -> Vec<super::kernels::Loop> {
        let first = self.outer_bound(x, all);
        let mut ls = Vec::new();
        for (i, &ax) in loops.iter().enumerate() {
            let d = if i == 0 {
                first.clone()
            } else {
                self.dim(x, ax)
            };
            let (iv, li) = self.loop_begin(&Q::Lit(0), &d);
            src[ax] = iv;
            ls.push(li);
        }
        ls
    }

    /// The bound of the outermost loop over `axes` of `x`: its dim, or 0
    /// when any of `axes` is empty (Section 4 §5.5: the fold of no
    /// elements is the identity). The quick tier runs every loop the IR
    /// spells out, so a nest over a huge axis around an empty one must not
    /// be entered at all (O3 deleted it).
    fn outer_bound(&mut self, x: Value, axes: &[usize]) -> Q {
        let dims: Vec<Q> = axes.iter().map(|&a| self.dim(x, a)).collect();
        let Some(first) = dims.first().cloned() else {
            return Q::Lit(1);
        };
        if dims.iter().any(|d| d.lit() == Some(0)) {
            return Q::Lit(0);
        }
        let unknown: Vec<Q> = dims[1..]
            .iter()
            .filter(|d| d.lit().is_none())
            .cloned()
            .collect();
        if unknown.is_empty() {
            return first;
        }
        Q::of(&self.b.hoisted(|ir| {
            let zero = V::int(Ty::I64, 0);
            let mut any = ir.icmp("eq", &unknown[0].v(), &zero);
            for d in &unknown[1..] {
                let z = ir.icmp("eq", &d.v(), &zero);
                any = ir.or(&any, &z);
            }
            ir.select(&any, &zero, &first.v())
        }))
    }

    /// The interpreter's sequential fold over `axes` (row-major): the
    /// final accumulator and, for float max/min, the NaN flag.
    fn fold_in_order(
        &mut self,
        (rop, dt, keyed): (ReduceOp, Dtype, bool),
        x: Value,
        src: &mut [Q],
        axes: &[usize],
        ty: Ty,
    ) -> (V, Option<V>) {
        let a = self.label();
        let accp = self.b.alloca(&format!("%acc{a}"), ty, 8);
        let nanp = self.b.alloca(&format!("%nan{a}"), Ty::I1, 1);
        let init = self.reduce_init(rop, dt, keyed);
        self.b.store(&init, &accp);
        self.b.store(&V::bool(false), &nanp);
        let ls = self.reduced_loops(x, (axes, axes), src);
        let e = self.reduce_elem(x, src);
        self.fold_into((rop, dt, keyed), (&accp, &nanp), &e, "");
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        let res = self.b.load(&accp);
        let nan = if dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min) {
            Some(self.b.load(&nanp))
        } else {
            None
        };
        (res, nan)
    }

    /// A float sum outside deterministic mode, in the lane order (crate
    /// docs, "Numerics"; Section 4 §6 lets this mode reassociate a sum):
    /// over the outer reduced axes in row-major order, element `i` of the
    /// last reduced axis is added to lane `i mod LANES` of `LANES`
    /// accumulators, each lane in index order; the lanes are then summed by
    /// halving (lane `j` += lane `j + h` for h = LANES/2, …, 1). The
    /// generated code fixes this order, with no fast-math flag for LLVM to
    /// reorder by: the inner loop of `LANES` independent lanes vectorizes
    /// as it is, and every pipeline (the quick tier's and O3), every host
    /// vector width and the shape-generic kernel compute the same bits.
    fn fold_lanes(&mut self, x: Value, src: &mut [Q], axes: &[usize], ty: Ty) -> V {
        let Some((&last, outer)) = axes.split_last() else {
            return self.const_f32(0.0);
        };
        let a = self.label();
        self.b
            .entry_line(&format!("%lanes{a} = alloca [{LANES} x {ty}], align 64"));
        let lane = |g: &mut Self, j: &Q| -> V {
            g.b.def_text(
                ty.ptr(),
                format!("getelementptr inbounds [{LANES} x {ty}], [{LANES} x {ty}]* %lanes{a}, i64 0, i64 {j}"),
            )
        };
        let zero = self.const_f32(0.0);
        for j in 0..LANES as i64 {
            let p = lane(self, &Q::Lit(j));
            self.b.store(&zero, &p);
        }
        let ls = self.reduced_loops(x, (outer, axes), src);
        let d = self.dim(x, last);
        let w = Q::Lit(LANES as i64);
        let chunks = match d.lit() {
            Some(n) => Q::Lit(n / LANES as i64),
            None => Q::of(&self.b.udiv(&d.v(), &w.v())),
        };
        // Element `base + j` into lane `j`, for `j` in `0..n`.
        let mut add = |g: &mut Self, base: &Q, n: &Q| {
            let (j, lj) = g.loop_begin(&Q::Lit(0), n);
            src[last] = g.badd(base, &j);
            let e = g.reduce_elem(x, src);
            let p = lane(g, &j);
            let acc = g.b.load(&p);
            let sum = g.b.float_binop("fadd", "", &acc, &e);
            g.b.store(&sum, &p);
            g.loop_end(lj);
        };
        if chunks.lit() != Some(0) {
            let (c, lc) = self.loop_begin(&Q::Lit(0), &chunks);
            let base = self.bmul(&c, &w);
            add(self, &base, &w);
            self.loop_end(lc);
        }
        let done = self.bmul(&chunks, &w);
        let rest = self.bsub(&d, &done);
        if rest.lit() != Some(0) {
            add(self, &done, &rest);
        }
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        let mut v: Vec<V> = (0..LANES as i64)
            .map(|j| {
                let p = lane(self, &Q::Lit(j));
                self.b.load(&p)
            })
            .collect();
        let mut h = LANES / 2;
        while h > 0 {
            for j in 0..h {
                v[j] = self.b.float_binop("fadd", "", &v[j], &v[j + h]);
            }
            h /= 2;
        }
        v.swap_remove(0)
    }

    /// `*accp = *accp op e` ([`Gen::reduce_combine`]), OR-ing float max/min's
    /// "e is NaN" into `*nanp`: one fold step of a reduction or pooling.
    pub(super) fn fold_into(
        &mut self,
        (rop, dt, keyed): (ReduceOp, Dtype, bool),
        (accp, nanp): (&V, &V),
        e: &V,
        ra: &str,
    ) {
        let acc = self.b.load(accp);
        let (nacc, isn) = self.reduce_combine(rop, dt, keyed, &acc, e, ra);
        if let Some(isn) = isn {
            let old = self.b.load(nanp);
            let nn = self.b.or(&old, &isn);
            self.b.store(&nn, nanp);
        }
        self.b.store(&nacc, accp);
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
    pub(super) fn reduce_init(&mut self, rop: ReduceOp, dt: Dtype, keyed: bool) -> V {
        let ty = Ty::compute(dt);
        let key = |x: f32| V::int(Ty::I32, float_key(x) as i64);
        match (rop, dt.is_float()) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => self.const_f32(0.0),
            (ReduceOp::Prod, true) => self.const_f32(1.0),
            (ReduceOp::Max, true) if keyed => key(f32::NEG_INFINITY),
            (ReduceOp::Min, true) if keyed => key(f32::INFINITY),
            (ReduceOp::Max, true) => self.const_f32(f32::NEG_INFINITY),
            (ReduceOp::Min, true) => self.const_f32(f32::INFINITY),
            (ReduceOp::Sum, false) => V::int(ty, 0),
            (ReduceOp::Prod, false) => V::int(ty, 1),
            (ReduceOp::Max, false) => V::int(ty, int_min(dt)),
            (ReduceOp::Min, false) => V::int(ty, int_max(dt)),
            (ReduceOp::Any, _) => V::bool(false),
            (ReduceOp::All, _) => V::bool(true),
            (ReduceOp::Mean, false) => V::int(ty, 0),
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
        acc: &V,
        e: &V,
        ra: &str,
    ) -> (V, Option<V>) {
        match (rop, dt.is_float()) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => {
                (self.b.float_binop("fadd", ra, acc, e), None)
            }
            (ReduceOp::Prod, true) => (self.b.float_binop("fmul", ra, acc, e), None),
            (ReduceOp::Max | ReduceOp::Min, true) if keyed => {
                let b = self.b.bitcast(e, Ty::I32);
                let sgn = self.b.ashr(&b, &V::int(Ty::I32, 31));
                let msk = self.b.and(&sgn, &V::int(Ty::I32, 2147483647));
                let key = self.b.xor(&b, &msk);
                let cmp = if rop == ReduceOp::Max { "sgt" } else { "slt" };
                let c = self.b.icmp(cmp, &key, acc);
                let m = self.b.select(&c, &key, acc);
                let isn = self.b.fcmp("uno", e, e);
                (m, Some(isn))
            }
            (ReduceOp::Max | ReduceOp::Min, true) => {
                // Not reached (float max/min are keyed); kept total.
                let m = self.extremum(rop == ReduceOp::Max, acc, e);
                let isn = self.b.fcmp("uno", e, e);
                (m, Some(isn))
            }
            (ReduceOp::Sum | ReduceOp::Mean, false) => (self.b.add(acc, e), None),
            (ReduceOp::Prod, false) => (self.b.mul(acc, e), None),
            (ReduceOp::Max, false) => {
                let c = self.b.icmp("sgt", e, acc);
                (self.b.select(&c, e, acc), None)
            }
            (ReduceOp::Min, false) => {
                let c = self.b.icmp("slt", e, acc);
                (self.b.select(&c, e, acc), None)
            }
            (ReduceOp::Any, _) => (self.b.or(acc, e), None),
            (ReduceOp::All, _) => (self.b.and(acc, e), None),
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
        res: &V,
        nan: Option<&V>,
        x: Value,
        axes: &[usize],
    ) -> V {
        let mut res = res.clone();
        if keyed {
            // The key map is an involution: key(key(b)) = b.
            let sgn = self.b.ashr(&res, &V::int(Ty::I32, 31));
            let msk = self.b.and(&sgn, &V::int(Ty::I32, 2147483647));
            let b = self.b.xor(&res, &msk);
            res = self.b.bitcast(&b, Ty::Float);
        }
        if dt.is_float() {
            if let Some(nn) = nan {
                let nanc = self.const_f32(f32::NAN);
                res = self.b.select(nn, &nanc, &res);
            }
            if rop == ReduceOp::Mean {
                let mut cnt = Q::Lit(1);
                for &ax in axes {
                    let d = self.dim(x, ax);
                    cnt = self.pmul(&cnt, &d);
                }
                let c = self.b.sitofp(&cnt.v(), Ty::Float);
                res = self.b.fdiv(&res, &c);
            }
            // A reduction's NaN is the canonical one, whichever element
            // (or fold order) produced it (Section 2 §3, as the interpreter).
            let canon = self.const_f32(cast::CANONICAL_NAN);
            let isn = self.b.fcmp("uno", &res, &res);
            res = self.b.select(&isn, &canon, &res);
            // max/min of `dt` values is a `dt` value, stored as is (the
            // interpreter does not round it either): rounding would turn an
            // F8E5M2 ±inf into the cast's saturated ±57344 (fuzz seed
            // 17179870744).
            if !matches!(rop, ReduceOp::Max | ReduceOp::Min) {
                res = self.round(dt, &res);
            }
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
        let dt = self.vals[x].dtype;
        let (o, l) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
        let mut src = self.out_to_in(out, x, &[axis], keepdims, &o);
        let a = self.label();
        let bvp = self.b.alloca(&format!("%bv{a}"), Ty::compute(dt), 8);
        let bip = self.b.alloca(&format!("%bi{a}"), Ty::I64, 8);
        src[axis] = Q::Lit(0);
        let first = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        self.b.store(&first, &bvp);
        self.b.store(&V::int(Ty::I64, 0), &bip);
        let d = self.dim(x, axis);
        let (iv, li) = self.loop_begin(&Q::Lit(1), &d);
        src[axis] = iv.clone();
        let e = self.val(
            x,
            &Idx {
                dims: Some(src),
                lin: None,
            },
        );
        let bv = self.b.load(&bvp);
        // Ties keep the first index; NaN beats every number (first NaN wins).
        let better = if dt.is_float() {
            let bnan = self.b.fcmp("uno", &bv, &bv);
            let enan = self.b.fcmp("uno", &e, &e);
            let cmp = if max { "ogt" } else { "olt" };
            let c = self.b.fcmp(cmp, &e, &bv);
            let c1 = self.b.or(&enan, &c);
            self.b.select(&bnan, &V::bool(false), &c1)
        } else if dt.is_bool() {
            let cmp = if max { "ugt" } else { "ult" };
            self.b.icmp(cmp, &e, &bv)
        } else {
            let cmp = if max { "sgt" } else { "slt" };
            self.b.icmp(cmp, &e, &bv)
        };
        let nbv = self.b.select(&better, &e, &bv);
        self.b.store(&nbv, &bvp);
        let bi = self.b.load(&bip);
        let nbi = self.b.select(&better, &iv.v(), &bi);
        self.b.store(&nbi, &bip);
        self.loop_end(li);
        let r = self.b.load(&bip);
        self.store(out, &o, &r);
        self.loop_end(l);
    }
}
