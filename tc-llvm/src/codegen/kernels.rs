//! Loops and kernel functions: the loop nest over an output, row and group
//! kernels, the fused-input setup, and each kernel's function wrapper.

use super::*;

/// An open loop of [`Gen::loop_begin`], closed by [`Gen::loop_end`].
#[must_use = "a loop must be closed"]
pub(super) struct Loop {
    l: usize,
    addr: V,
    iv: V,
    head: Block,
    exit: Block,
}

impl<'a> Gen<'a> {
    // ---- loops -----------------------------------------------------------

    pub(super) fn label(&mut self) -> usize {
        self.lbl += 1;
        self.lbl
    }

    /// Open `for iv in lo..hi`: the induction variable in a stack slot
    /// (the optimiser promotes it), the test at the head, the body's block
    /// current. Returns `iv` and the loop, for [`Self::loop_end`].
    pub(super) fn loop_begin(&mut self, lo: &Q, hi: &Q) -> (Q, Loop) {
        let l = self.label();
        let addr = self.b.alloca(&format!("%iv{l}.addr"), Ty::I64, 8);
        self.b.store_align(&lo.v(), &addr, 8);
        let head = self.b.new_block(&format!("L{l}.h"));
        let body = self.b.new_block(&format!("L{l}.b"));
        let exit = self.b.new_block(&format!("L{l}.e"));
        self.b.br(&head);
        self.b.switch_to(&head);
        let iv = self.b.named(format!("iv{l}")).load_align(&addr, 8);
        let c = self.b.named(format!("c{l}")).icmp("slt", &iv, &hi.v());
        self.b.cond_br(&c, &body, &exit);
        self.b.switch_to(&body);
        self.memo.clear();
        let q = Q::of(&iv);
        (
            q,
            Loop {
                l,
                addr,
                iv,
                head,
                exit,
            },
        )
    }

    /// Close `lp`: the increment and the back edge; the exit block current.
    pub(super) fn loop_end(&mut self, lp: Loop) {
        let Loop {
            l,
            addr,
            iv,
            head,
            exit,
        } = lp;
        let next = self
            .b
            .named(format!("iv{l}.n"))
            .add_nuw_nsw(&iv, &V::int(Ty::I64, 1));
        self.b.store_align(&next, &addr, 8);
        self.b.br(&head);
        self.b.switch_to(&exit);
        self.memo.clear();
    }

    // ---- kernels -----------------------------------------------------------

    pub(super) fn is_flat(&self, v: Value, root: bool) -> bool {
        let Some(inst) = self.func.inst(v).filter(|_| root || !self.st.mat[v]) else {
            return true;
        };
        let op = &inst.op;
        match op {
            Op::Broadcast(..)
            | Op::Transpose(..)
            | Op::Slice { .. }
            | Op::Concat(..)
            | Op::Pad { .. }
            | Op::Rope { .. }
            | Op::Iota(..) => false,
            Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Gather { .. }
            | Op::TopK { .. }
            | Op::CumSum { .. }
            | Op::Conv { .. }
            | Op::Pool { .. } => false,
            _ => op.operands().iter().all(|o| self.is_flat(*o, false)),
        }
    }

    pub(super) fn kernel(&mut self, id: usize, out: Value, inputs: &[Value]) -> KernelShape {
        let all: Vec<Value> = std::iter::once(out).chain(inputs.iter().copied()).collect();
        let mut params = self.setup(&all, 1);
        self.first_block();
        let func = self.func;
        let op = &func
            .inst(out)
            .expect("a kernel writes an instruction's value")
            .op;
        let shape = match op {
            Op::Reduce {
                op: rop,
                axes,
                keepdims,
                x,
            } => {
                if let Some(block) = self.col_block(axes, *x) {
                    self.reduce_cols(out, *rop, axes, *keepdims, *x, block);
                    KernelShape::Cols { block }
                } else {
                    self.reduce_body(out, *rop, axes, *keepdims, *x);
                    KernelShape::Reduce
                }
            }
            Op::ArgReduce {
                max,
                axis,
                keepdims,
                x,
            } => {
                self.argreduce_body(out, *max, *axis, *keepdims, *x);
                KernelShape::Reduce
            }
            Op::CumSum { axis, x } => {
                self.scan_body(out, *axis, *x);
                KernelShape::Scan { axis: *axis }
            }
            Op::Pool {
                kind,
                kernel,
                window,
                x,
            } => {
                self.pool_body(out, *kind, kernel, window, *x);
                KernelShape::Reduce
            }
            Op::TopK {
                axis, indices, x, ..
            } => {
                // The values form's heap: one more (written) buffer.
                let scratch = (!*indices).then(|| {
                    let k = params.len();
                    params.push(format!("i8* noalias nocapture %a{k}"));
                    let raw = V::new(Ty::I8.ptr(), format!("%a{k}"));
                    self.b.hoisted(|b| b.bitcast(&raw, Ty::I64.ptr()))
                });
                self.topk_body(out, *axis, *indices, *x, scratch);
                KernelShape::Select {
                    axis: *axis,
                    scratch: !*indices,
                }
            }
            _ => {
                if self.is_flat(out, true) {
                    let (o, l) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
                    let idx = Idx {
                        dims: None,
                        lin: Some(o.clone()),
                    };
                    let x = self.val_root(out, &idx);
                    self.store(out, &o, &x);
                    self.loop_end(l);
                    KernelShape::Flat
                } else {
                    let (o, l) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
                    self.nested_row(out, &o);
                    self.loop_end(l);
                    KernelShape::Nested
                }
            }
        };
        self.b.ret_void();
        self.finish_fn(id, &params);
        shape
    }

    /// Row `o` of a nested elementwise kernel writing `out`: the inner loop
    /// over its last axis.
    pub(super) fn nested_row(&mut self, out: Value, o: &Q) {
        let r = self.vals[out].shape.len();
        if r == 0 {
            let idx = Idx {
                dims: Some(vec![]),
                lin: Some(Q::Lit(0)),
            };
            let x = self.val_root(out, &idx);
            self.store(out, &Q::Lit(0), &x);
            return;
        }
        // Unravel the outer index over dims[0..r-1].
        let mut dims = vec![Q::Lit(0); r];
        let mut rest = o.clone();
        for k in (0..r - 1).rev() {
            let d = self.dim(out, k);
            if k == 0 {
                dims[k] = rest.clone();
            } else {
                (dims[k], rest) = self.divmod(&rest, &d);
            }
        }
        let inner = self.dim(out, r - 1);
        let base = self.bmul(o, &inner);
        if let Some(x) = self.splits_last_axis(out) {
            self.split_row(out, x, dims, &base);
            return;
        }
        if !self.generic {
            self.inner_loop(out, dims, &base, &inner);
            return;
        }
        // Shape-generic: a version of the loop that assumes no run-time
        // extent it broadcasts is 1 (a bias `[O]` under `[B, S, O]`: O is
        // a variable, almost never 1), taken when none is, and the general
        // one otherwise. Same values either way: an extent that is not 1
        // is read at the output's index in both.
        let l = self.label();
        let (fast, slow, join) = (
            self.b.new_block(&format!("V{l}.f")),
            self.b.new_block(&format!("V{l}.s")),
            self.b.new_block(&format!("V{l}.x")),
        );
        // Defined in the entry block below, once the flags are known.
        let vc = V::new(Ty::I1, format!("%vc{l}"));
        self.b.cond_br(&vc, &fast, &slow);
        self.b.switch_to(&fast);
        let outer = std::mem::replace(&mut self.assumed, Some(Vec::new()));
        self.inner_loop(out, dims.clone(), &base, &inner);
        let flags = std::mem::replace(&mut self.assumed, outer).unwrap_or_default();
        self.b.br(&join);
        self.b.switch_to(&slow);
        if !flags.is_empty() {
            self.inner_loop(out, dims, &base, &inner);
        }
        self.b.br(&join);
        self.b.switch_to(&join);
        let mut any = V::bool(false);
        for f in &flags {
            any = self.b.hoisted(|b| b.or(&any, f));
        }
        self.b
            .entry_line(&format!("{vc} = xor {}, true", any.typed()));
    }

    /// The inner loop of [`Gen::nested_row`] over the last axis.
    fn inner_loop(&mut self, out: Value, mut dims: Vec<Q>, base: &Q, inner: &Q) {
        let r = dims.len();
        let mut from = Q::Lit(0);
        if self.rotates_pairs(out, r, true) {
            // One iteration per pair: elements `2p` and `2p + 1`, each
            // computed and stored as the plain loop computes it (same
            // values), but with indices LLVM folds: the pair's coordinates
            // and its angle are then read at `2p`, `2p + 1` and `p`, runs
            // the vectorizer loads whole, instead of at indices computed
            // from `j` bit by bit (`j & −2`, `j | 1`, `j >> 1`), which it
            // gathered lane by lane (a 16 × 9 × 64 rotation: 13.3 → 5.5 µs
            // a call). The plain loop below takes an odd extent's last
            // element, which the typing (`rope` needs an even last axis)
            // leaves none of.
            let half = match inner.lit() {
                Some(n) => Q::Lit(n / 2),
                None => Q::of(&self.b.hoisted(|b| b.lshr(&inner.v(), &V::int(Ty::I64, 1)))),
            };
            let (p, l2) = self.loop_begin(&Q::Lit(0), &half);
            let even = Q::of(&self.b.add_nuw_nsw(&p.v(), &p.v()));
            let odd = Q::of(&self.b.add_nuw_nsw(&even.v(), &V::int(Ty::I64, 1)));
            self.element(out, &mut dims, base, even);
            // The odd element's values are its own: nothing of the even
            // one's index is reused.
            self.memo.clear();
            self.element(out, &mut dims, base, odd);
            self.loop_end(l2);
            from = self.padd(&half, &half);
        }
        let (j, l2) = self.loop_begin(&from, inner);
        self.element(out, &mut dims, base, j);
        self.loop_end(l2);
    }

    /// Element `j` of the row at `base` (its leading indices in `dims`):
    /// computed and stored.
    fn element(&mut self, out: Value, dims: &mut [Q], base: &Q, j: Q) {
        let r = dims.len();
        dims[r - 1] = j.clone();
        let lin = self.badd(base, &j);
        let idx = Idx {
            dims: Some(dims.to_vec()),
            lin: Some(lin.clone()),
        };
        let x = self.val_root(out, &idx);
        self.store(out, &lin, &x);
    }

    /// Whether computing `v` (unmaterialized ops below it, each of rank
    /// `rank`) reaches a pairs-layout `rope` through elementwise ops only,
    /// so that its last axis is the root's.
    fn rotates_pairs(&self, v: Value, rank: usize, root: bool) -> bool {
        let Some(inst) = self.func.inst(v).filter(|_| root || !self.st.mat[v]) else {
            return false;
        };
        if self.vals[v].shape.len() != rank {
            return false;
        }
        match &inst.op {
            Op::Rope {
                layout: RopeLayout::Pairs,
                ..
            } => true,
            Op::Unary(..)
            | Op::Binary(..)
            | Op::Cast(..)
            | Op::Select(..)
            | Op::ScalarBinary { .. } => inst
                .op
                .operands()
                .iter()
                .any(|&o| self.rotates_pairs(o, rank, false)),
            _ => false,
        }
    }

    /// `Some(x)` when `out` is `reshape(x)` splitting only its last axis:
    /// `x`'s shape is `out`'s leading dims followed by dims whose product is
    /// `out`'s last (a head merge, `[B, S, H·D]` from `[B, S, H, D]`). Only
    /// with every dim a literal (σ-specialised): a shape-generic kernel
    /// serves σs the split might not hold for.
    fn splits_last_axis(&mut self, out: Value) -> Option<Value> {
        let Op::Reshape(_, x) = &self.func.inst(out)?.op else {
            return None;
        };
        let x = *x;
        if self.stashed.is_some() {
            return None;
        }
        let (r, rx) = (self.vals[out].shape.len(), self.vals[x].shape.len());
        if r == 0 || rx <= r {
            return None;
        }
        let lits = |g: &mut Self, v: Value, n: usize| -> Option<Vec<i64>> {
            (0..n).map(|k| g.dim(v, k).lit()).collect()
        };
        let (od, xd) = (lits(self, out, r)?, lits(self, x, rx)?);
        let tail = xd[r - 1..]
            .iter()
            .try_fold(1i64, |a, &d| a.checked_mul(d))?;
        (od[..r - 1] == xd[..r - 1] && tail == od[r - 1]).then_some(x)
    }

    /// Row `base / last` of `out = reshape(x)` ([`Self::splits_last_axis`]):
    /// nested loops over `x`'s trailing dims, so `x`'s element comes from
    /// its own multi-index (no division per element; a transpose under it
    /// reads runs the vectorizer sees). Same elements, same order, same
    /// values as the flat inner loop.
    fn split_row(&mut self, out: Value, x: Value, mut dims: Vec<Q>, base: &Q) {
        let (r, rx) = (self.vals[out].shape.len(), self.vals[x].shape.len());
        dims.truncate(r - 1);
        let mut loops = Vec::with_capacity(rx - r + 1);
        let mut lin = base.clone();
        for k in r - 1..rx {
            let d = self.dim(x, k);
            let (j, l) = self.loop_begin(&Q::Lit(0), &d);
            // Row-major offset inside the row: j · ∏ later dims (literals).
            // Saturating: past i64 some later dim is 0 and no row is read.
            let later = (k + 1..rx)
                .map(|q| self.dim(x, q).lit().unwrap_or(1))
                .fold(1i64, i64::saturating_mul);
            let term = self.bmul(&j, &Q::Lit(later));
            lin = self.badd(&lin, &term);
            dims.push(j);
            loops.push(l);
        }
        let idx = Idx {
            dims: Some(dims),
            lin: Some(lin.clone()),
        };
        // As `val_root(out)` would through the reshape: `out` is the root,
        // `x` is loaded if materialized, else computed.
        self.root = Some(out);
        let v = self.val(x, &idx);
        self.root = None;
        self.store(out, &lin, &v);
        for l in loops.into_iter().rev() {
            self.loop_end(l);
        }
    }

    /// A row group ([`Step::Group`]): one loop over rows; per row, every
    /// member's row in order (reductions first write their row, later
    /// members read it while the row's inputs are still in L1).
    pub(super) fn group_kernel(
        &mut self,
        id: usize,
        members: &[Value],
        inputs: &[Value],
    ) -> KernelShape {
        let all: Vec<Value> = members.iter().chain(inputs.iter()).copied().collect();
        let params = self.setup(&all, members.len());
        self.first_block();
        let (o, l) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
        let func = self.func;
        let stashes = self.group_stashes(members);
        // What row `row` holds when member `at` runs: the stash of the
        // latest reduction before `at` into that row.
        let order = |v: Value| members.iter().position(|&x| x == v);
        let held = |row: Value, at: Value| {
            stashes
                .iter()
                .filter(|s| s.2 == row && order(s.0) < order(at))
                .max_by_key(|s| order(s.0))
                .map(|s| (s.1, s.2))
        };
        for &m in members {
            self.memo.clear();
            match &func
                .inst(m)
                .expect("a group member is an instruction's value")
                .op
            {
                Op::Reduce {
                    op: rop,
                    axes,
                    keepdims,
                    x,
                } => {
                    self.stash = stashes.iter().find(|(r, _, _)| *r == m).map(|s| (s.1, s.2));
                    self.stashed = self.stash.and_then(|(_, row)| held(row, m));
                    self.reduce_row(m, *rop, axes, *keepdims, *x, &o);
                    self.stash = None;
                    self.stashed = None;
                }
                _ => {
                    self.stashed = held(m, m);
                    self.nested_row(m, &o);
                    self.stashed = None;
                }
            }
        }
        self.loop_end(l);
        self.b.ret_void();
        self.finish_fn(id, &params);
        KernelShape::Rows
    }

    /// `(reduction member, x, later member)` triples of a row group where
    /// the reduction's operand `x` (computed, F32, reduced over its last
    /// axis only) is used elementwise — at the same index — by a later
    /// non-reduction member of the same shape: the reduction pass stores
    /// `x` into that member's row and the member reads it back (values are
    /// identical, so results are bit-identical to recomputing).
    ///
    /// Later reductions claim a member's row first: in a softmax the sum's
    /// operand `exp(x − max)` is stashed (the output pass then divides
    /// without a second `exp`). An earlier reduction whose operand the
    /// later one's reads elementwise stashes there too, first: the max pass
    /// stores `x` (GPT-2's masked, scaled scores), the sum pass reads it
    /// back instead of recomputing it and overwrites it with `exp(x − max)`
    /// (same index, so each element is read before it is overwritten).
    pub(super) fn group_stashes(&self, members: &[Value]) -> Vec<(Value, Value, Value)> {
        let mut out: Vec<(Value, Value, Value)> = Vec::new();
        for (i, &r) in members.iter().enumerate().rev() {
            let Some(Op::Reduce { axes, x, .. }) = self.func.inst(r).map(|i| &i.op) else {
                continue;
            };
            let x = *x;
            let xs = &self.vals[x].shape;
            if self.func.inst(x).is_none()
                || self.st.mat[x]
                || self.vals[x].dtype != Dtype::F32
                || xs.is_empty()
                || axes.as_slice() != [xs.len() - 1]
            {
                continue;
            }
            for &m in &members[i + 1..] {
                if matches!(self.func.inst(m).map(|i| &i.op), Some(Op::Reduce { .. }))
                    || self.vals[m].shape != *xs
                    || self.vals[m].dtype != Dtype::F32
                {
                    continue;
                }
                // The row's next reader: the member itself, or the later
                // reduction whose stash this one's feeds (a chain: the
                // max's `x` is read back by the sum pass to form
                // `exp(x − max)`, which the output pass reads back).
                let next = match out.iter().rfind(|s| s.2 == m) {
                    Some(later) => later.1,
                    None => m,
                };
                if self.elementwise_use(next, x, true) == Some(true) {
                    out.push((r, x, m));
                    break;
                }
            }
        }
        out
    }

    /// Whether computing `v` (unmaterialized ops below it) reads `x`:
    /// `Some(true)` only through elementwise ops (same index), `Some(false)`
    /// not at all, `None` also through an index-changing op.
    pub(super) fn elementwise_use(&self, v: Value, x: Value, root: bool) -> Option<bool> {
        if v == x {
            return Some(true);
        }
        let Some(inst) = self.func.inst(v).filter(|_| root || !self.st.mat[v]) else {
            return Some(false);
        };
        let op = &inst.op;
        let elementwise = matches!(
            op,
            Op::Unary(..)
                | Op::Binary(..)
                | Op::Cast(..)
                | Op::Select(..)
                | Op::ScalarBinary { .. }
        );
        let mut any = false;
        for a in op.operands() {
            match self.elementwise_use(a, x, false) {
                None => return None,
                Some(true) if !elementwise => return None,
                Some(u) => any |= u,
            }
        }
        Some(any)
    }

    /// Reset the per-function state and bind the buffer parameters (the
    /// first `writable` are written).
    pub(super) fn setup(&mut self, all: &[Value], writable: usize) -> Vec<String> {
        self.b.reset();
        self.memo.clear();
        self.bufs.clear();
        let mut params = Vec::new();
        for (k, v) in all.iter().enumerate() {
            let st = Ty::storage(self.vals[*v].dtype);
            if k < writable {
                params.push(format!("i8* noalias nocapture %a{k}"));
            } else {
                params.push(format!("i8* noalias nocapture readonly %a{k}"));
            }
            let raw = V::new(Ty::I8.ptr(), format!("%a{k}"));
            let p = if st == Ty::I8 {
                raw
            } else {
                self.b.hoisted(|b| b.bitcast(&raw, st.ptr()))
            };
            self.bufs.insert(*v, p);
        }
        params
    }

    /// The root value computed (not loaded) even though it is materialized.
    pub(super) fn val_root(&mut self, v: Value, idx: &Idx) -> V {
        self.root = Some(v);
        let r = self.val(v, idx);
        self.root = None;
        r
    }

    pub(super) fn out_to_in(
        &mut self,
        out: Value,
        x: Value,
        red: &[usize],
        keepdims: bool,
        o: &Q,
    ) -> Vec<Q> {
        let od = self.unravel(out, o);
        let r = self.vals[x].shape.len();
        let mut src = vec![Q::Lit(0); r];
        let mut j = 0;
        for (a, s) in src.iter_mut().enumerate() {
            if red.contains(&a) {
                if keepdims {
                    j += 1;
                }
                continue;
            }
            *s = od[j].clone();
            j += 1;
        }
        src
    }

    /// Enter the kernel body's first block, `b0` (the entry block,
    /// [`Builder::pre`], branches to it: [`Self::finish_fn`]).
    fn first_block(&mut self) {
        let b0 = self.b.new_block("b0");
        self.b.switch_to(&b0);
    }

    pub(super) fn finish_fn(&mut self, id: usize, params: &[String]) {
        self.b.check_body();
        let mut f = String::new();
        let _ = writeln!(
            f,
            "define internal void @k{id}_body({}, i64* noalias nocapture readonly %shp, i64* noalias nocapture readonly %sc, i64 %start, i64 %end) #2 {{",
            params.join(", ")
        );
        f.push_str("entry:\n");
        f.push_str(&self.b.pre);
        f.push_str("  br label %b0\n");
        f.push_str(&self.b.body);
        f.push_str("}\n\n");
        let _ = writeln!(
            f,
            "define void @k{id}(i8** nocapture readonly %bufs, i64* %shp, i64* %sc, i64 %start, i64 %end) #0 {{"
        );
        let mut args = Vec::new();
        for k in 0..params.len() {
            let _ = writeln!(
                f,
                "  %pa{k} = getelementptr inbounds i8*, i8** %bufs, i64 {k}"
            );
            let _ = writeln!(f, "  %p{k} = load i8*, i8** %pa{k}, align 8");
            args.push(format!("i8* %p{k}"));
        }
        let _ = writeln!(
            f,
            "  call void @k{id}_body({}, i64* %shp, i64* %sc, i64 %start, i64 %end)\n  ret void\n}}\n",
            args.join(", ")
        );
        self.globals.push_str(&f);
    }
}
