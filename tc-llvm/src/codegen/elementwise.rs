//! Element expressions: unary, binary and cast per dtype (Section 4 §5.1–§5.3),
//! and `val`, the fused expression tree of one output element, where layout
//! ops (transpose, reshape, broadcast, slice, concat) only rewrite the index.

use super::*;

impl<'a> Gen<'a> {
    pub(super) fn unary(&mut self, op: UnaryOp, dt: Dtype, x: &V) -> V {
        use UnaryOp as U;
        if dt.is_bool() {
            return self.b.xor(x, &V::bool(true));
        }
        if dt.is_int() {
            let ty = Ty::compute(dt);
            let r = match op {
                U::Neg => self.b.sub(&V::int(ty, 0), x),
                U::Abs => {
                    let n = self.b.sub(&V::int(ty, 0), x);
                    let c = self.b.icmp("slt", x, &V::int(ty, 0));
                    self.b.select(&c, &n, x)
                }
                _ => {
                    let c = self.b.icmp("sgt", x, &V::int(ty, 0));
                    self.b.select(&c, x, &V::int(ty, 0))
                }
            };
            return self.round(dt, &r);
        }
        let fast = self.opts.fast_math && dt == Dtype::F32;
        let r = match op {
            // Sign operations: the NaN keeps its payload, takes the op's
            // sign and is quieted (Section 2 §3).
            U::Neg | U::Abs => {
                let r = if op == U::Neg {
                    self.b.fneg(x)
                } else {
                    self.llvm_f32("fabs", &[x])
                };
                let q = self.quiet(&r);
                return self.round(dt, &q);
            }
            // relu x = maximum(x, +0) (Section 2 §3): relu(−0) = +0.
            U::Relu => {
                let zero = self.const_f32(0.0);
                let r = self.extremum(true, x, &zero);
                return self.round(dt, &r);
            }
            U::Sqrt => self.llvm_f32("sqrt", &[x]),
            U::Recip => {
                let one = self.const_f32(1.0);
                self.b.fdiv(&one, x)
            }
            U::Floor => self.llvm_f32("floor", &[x]),
            U::Ceil => self.llvm_f32("ceil", &[x]),
            U::Round => self.llvm_f32("rint", &[x]),
            U::Rsqrt => {
                // Exactly the interpreter's `1.0 / (x as f64).sqrt()` rounded to f32.
                let d = self.b.fpext(x, Ty::Double);
                let s = self.b.call(Ty::Double, "llvm.sqrt.f64", &[&d]);
                let q = self.b.fdiv(&V::new(Ty::Double, "1.0"), &s);
                self.b.fptrunc(&q, Ty::Float)
            }
            U::Exp if fast => self.fast_exp(x),
            U::Log if fast => self.fast_log(x),
            U::Tanh if fast => self.fast_tanh(x),
            // With e = e^{−|x|} ∈ [0, 1] (never overflows): 1/(1 + e) for
            // x ≥ 0, e/(1 + e) for x < 0. Error bound: relative ≤ 3 ulp
            // (3.6e-7) where the result is normal; in the far left tail
            // (x < −87.3) the result is e itself, subnormal, within 2⁻¹⁴⁸;
            // exactly 0 at −∞ (and below −104), 1 at +∞.
            U::Sigmoid if fast => {
                let ax = self.llvm_f32("fabs", &[x]);
                let n = self.b.fneg(&ax);
                let e = self.fast_exp(&n);
                let one = self.const_f32(1.0);
                let d = self.b.fadd(&one, &e);
                let zero = self.const_f32(0.0);
                let neg = self.b.fcmp("olt", x, &zero);
                let num = self.b.select(&neg, &e, &one);
                self.b.fdiv(&num, &d)
            }
            U::Erf if fast => self.fast_erf(x),
            // x·½·(1 + erf(x/√2)) with fast_erf. Error bound: relative ≤ 4
            // ulp (4.8e-7) plus absolute 1e-6 (erf's absolute error times
            // ½|x|, |x| ≤ 5.5, where 1 + erf cancels); −0 below −5.5 (the
            // true value is above −1.1e-7 there), NaN at −∞ (∞ · 0, as the
            // interpreter's formula gives).
            U::Gelu if fast => {
                let k = self.const_f32(std::f32::consts::FRAC_1_SQRT_2);
                let xs = self.b.fmul(x, &k);
                let e = self.fast_erf(&xs);
                let one = self.const_f32(1.0);
                let s = self.b.fadd(&one, &e);
                let half = self.const_f32(0.5);
                let hx = self.b.fmul(x, &half);
                let g = self.b.fmul(&hx, &s);
                // Far left tail: 1 + erf cancels; gelu(x) < 1e-7 in magnitude there.
                let lim = self.const_f32(-5.5);
                let tail = self.b.fcmp("olt", x, &lim);
                let zero = self.const_f32(0.0);
                let z = self.b.fmul(x, &zero);
                self.b.select(&tail, &z, &g)
            }
            _ => {
                let c = V::int(Ty::I32, unary_code(op) as i64);
                self.b.call(Ty::Float, "tc_unary_exact", &[&c, x])
            }
        };
        let r = self.nan_result(&r, &[x]);
        self.round(dt, &r)
    }

    pub(super) fn binary(&mut self, op: BinaryOp, dt: Dtype, a: &V, b: &V) -> V {
        use BinaryOp as B;
        let ty = Ty::compute(dt);
        if dt.is_bool() {
            return match op {
                B::And => self.b.and(a, b),
                B::Or => self.b.or(a, b),
                B::Xor => self.b.xor(a, b),
                B::Eq => self.b.icmp("eq", a, b),
                B::Ne => self.b.icmp("ne", a, b),
                B::Lt => self.b.icmp("ult", a, b),
                B::Le => self.b.icmp("ule", a, b),
                B::Gt => self.b.icmp("ugt", a, b),
                _ => self.b.icmp("uge", a, b),
            };
        }
        if dt.is_int() {
            let r = match op {
                B::Add => self.b.add(a, b),
                B::Sub => self.b.sub(a, b),
                B::Mul => self.b.mul(a, b),
                B::Div | B::Rem => {
                    // ÷0 = 0; MIN ÷ −1 wraps (Section 2 §3); no UB divisor reaches sdiv.
                    let z = self.b.icmp("eq", b, &V::int(ty, 0));
                    let m1 = self.b.icmp("eq", b, &V::int(ty, -1));
                    let bad = self.b.or(&z, &m1);
                    let safe = self.b.select(&bad, &V::int(ty, 1), b);
                    if op == B::Div {
                        let q = self.b.sdiv(a, &safe);
                        let n = self.b.sub(&V::int(ty, 0), a);
                        let q1 = self.b.select(&m1, &n, &q);
                        self.b.select(&z, &V::int(ty, 0), &q1)
                    } else {
                        let r = self.b.srem(a, &safe);
                        self.b.select(&bad, &V::int(ty, 0), &r)
                    }
                }
                B::Max => {
                    let c = self.b.icmp("sgt", a, b);
                    self.b.select(&c, a, b)
                }
                B::Min => {
                    let c = self.b.icmp("slt", a, b);
                    self.b.select(&c, a, b)
                }
                B::Eq => return self.b.icmp("eq", a, b),
                B::Ne => return self.b.icmp("ne", a, b),
                B::Lt => return self.b.icmp("slt", a, b),
                B::Le => return self.b.icmp("sle", a, b),
                B::Gt => return self.b.icmp("sgt", a, b),
                B::Ge => return self.b.icmp("sge", a, b),
                _ => return V::int(ty, 0),
            };
            return self.round(dt, &r);
        }
        let r = match op {
            B::Add => self.b.fadd(a, b),
            B::Sub => self.b.fsub(a, b),
            B::Mul => self.b.fmul(a, b),
            B::Div => self.b.fdiv(a, b),
            B::Max | B::Min => {
                let m = self.extremum(op == B::Max, a, b);
                return self.round(dt, &m);
            }
            B::Pow => self.b.call(Ty::Float, "tc_pow_exact", &[a, b]),
            B::Eq => return self.b.fcmp("oeq", a, b),
            B::Ne => return self.b.fcmp("une", a, b),
            B::Lt => return self.b.fcmp("olt", a, b),
            B::Le => return self.b.fcmp("ole", a, b),
            B::Gt => return self.b.fcmp("ogt", a, b),
            B::Ge => return self.b.fcmp("oge", a, b),
            _ => return self.const_f32(0.0),
        };
        let r = self.nan_result(&r, &[a, b]);
        self.round(dt, &r)
    }

    /// `cast[to]` on a computed element of dtype `from` (Section 2 §5).
    pub(super) fn cast(&mut self, from: Dtype, to: Dtype, x: &V) -> V {
        if from.is_float() && to.is_float() {
            // `cast_value`: a NaN operand is quieted (Section 2 §3), also
            // for a same-dtype cast. Only an F32 value can hold a
            // signalling NaN (a narrow float's decode quiets it), and
            // rounding to BF16 quiets one itself: no test then.
            if from != Dtype::F32 || to == Dtype::BF16 {
                return self.round(to, x);
            }
            let q = self.quiet(x);
            return self.round(to, &q);
        }
        if from == to {
            return x.clone();
        }
        let (ft, tt) = (Ty::compute(from), Ty::compute(to));
        if from.is_float() {
            if to.is_bool() {
                let z = self.const_f32(0.0);
                return self.b.fcmp("une", x, &z);
            }
            // Truncate toward zero, saturate, NaN → 0 (Rust `as`),
            // without `fptosi.sat`, which LLVM leaves to scalar code in a
            // vectorized loop (512 × 1536 elements to I8 took 1.2 ms
            // against 0.1; to I32 1.4 against 0.1): NaN made 0, the value
            // clamped below at the dtype's least value (a power of two,
            // exact in f32) and, for a narrow int, above at its greatest
            // (exact too); a plain `fptosi` of a value then in range, to
            // i32 and truncated for a narrow int. I32's and I64's greatest
            // values are not f32 values: from 2^(w−1) up the result is
            // the greatest, selected after the conversion.
            let (lo, hi) = to.int_range().expect("an int dtype");
            let lo = self.const_f32(lo as f32);
            let nan = self.b.fcmp("uno", x, x);
            let zero = self.const_f32(0.0);
            let v = self.b.select(&nan, &zero, x);
            let below = self.b.fcmp("olt", &v, &lo);
            let v = self.b.select(&below, &lo, &v);
            if tt.int_bits().is_some_and(|b| b < 32) {
                let hi = self.const_f32(hi as f32);
                let above = self.b.fcmp("ogt", &v, &hi);
                let v = self.b.select(&above, &hi, &v);
                let r = self.b.fptosi(&v, Ty::I32);
                return self.b.trunc(&r, tt);
            }
            let bits = tt.int_bits().expect("an int type") as i32;
            let top = self.const_f32(2f32.powi(bits - 1));
            let over = self.b.fcmp("oge", &v, &top);
            let v = self.b.select(&over, &zero, &v);
            let r = self.b.fptosi(&v, tt);
            return self.b.select(&over, &V::int(tt, hi), &r);
        }
        if from.is_bool() {
            if to.is_float() {
                return self.b.uitofp(x, Ty::Float);
            }
            return self.b.zext(x, tt);
        }
        // From an int.
        if to.is_bool() {
            return self.b.icmp("ne", x, &V::int(ft, 0));
        }
        if to.is_float() {
            if to == Dtype::F32 {
                return self.b.sitofp(x, Ty::Float);
            }
            if matches!(from, Dtype::I8 | Dtype::I4 | Dtype::I16) {
                // Exact in f32, so one rounding into the narrow dtype.
                let f = self.b.sitofp(x, Ty::Float);
                return self.round(to, &f);
            }
            let w = if ft == Ty::I64 {
                x.clone()
            } else {
                self.b.sext(x, Ty::I64)
            };
            let c = V::int(Ty::I32, dtype_code(to) as i64);
            return self.b.call(Ty::Float, "tc_int_to_float", &[&c, &w]);
        }
        // int → int: sign-extend or keep the low bits.
        let r = if ft.int_bits() < tt.int_bits() {
            self.b.sext(x, tt)
        } else if ft.int_bits() > tt.int_bits() {
            self.b.trunc(x, tt)
        } else {
            x.clone()
        };
        if to == Dtype::I4 {
            return self.round(Dtype::I4, &r);
        }
        r
    }

    /// The element of `v` at `idx`, in its computation type.
    pub(super) fn val(&mut self, v: Value, idx: &Idx) -> V {
        let key = format!("{v}|{:?}|{:?}", idx.dims, idx.lin);
        if let Some(r) = self.memo.get(&key) {
            return r.clone();
        }
        let r = self.val_uncached(v, idx);
        self.memo.insert(key, r.clone());
        r
    }

    /// Element `idx` of a value that has a buffer (a parameter, a
    /// materialised value, or a group member stashed in `m`): its load.
    fn load_at(&mut self, v: Value, idx: &Idx) -> V {
        let off = match &idx.lin {
            Some(l) => l.clone(),
            None => {
                let d = idx.dims.clone().unwrap_or_default();
                self.ravel(v, &d)
            }
        };
        self.load(v, &off)
    }

    pub(super) fn val_uncached(&mut self, v: Value, idx: &Idx) -> V {
        if let Some((x, m)) = self.stashed {
            if x == v {
                // Same shape as `m`: the same linear index.
                return self.load_at(m, idx);
            }
        }
        let func = self.func;
        let inst = func
            .inst(v)
            .filter(|_| !self.st.mat[v] || self.root == Some(v));
        let Some(inst) = inst else {
            return self.load_at(v, idx);
        };
        let op = &inst.op;
        match op {
            Op::Reshape(..)
            | Op::Transpose(..)
            | Op::Broadcast(..)
            | Op::Slice { .. }
            | Op::Concat(..)
            | Op::Pad { .. } => self.layout_val(v, op, idx),
            Op::Rope {
                layout,
                x,
                cos,
                sin,
            } => self.rope(v, (*layout, *x, *cos, *sin), idx),
            // Never inlined, so always materialized (a dim value is read by
            // calls only, `ir::verify_structure`): unreachable by
            // construction. `plan::inlinable` is the one list of such ops.
            _ if !crate::plan::inlinable(op) => self.load(v, &Q::Lit(0)),
            _ => self.compute_val(v, op, idx),
        }
    }

    /// An elementwise op's element at `idx`: its operands' elements at the
    /// same index, computed (§5.1–§5.3), or a fill / iota value.
    fn compute_val(&mut self, v: Value, op: &Op, idx: &Idx) -> V {
        let dt = self.vals[v].dtype;
        match op {
            Op::Unary(u, x) => {
                let a = self.val(*x, idx);
                self.unary(*u, dt, &a)
            }
            Op::Cast(to, x) => {
                let from = self.vals[*x].dtype;
                let a = self.val(*x, idx);
                self.cast(from, *to, &a)
            }
            Op::Binary(o, a, b) => {
                let odt = self.vals[*a].dtype;
                let x = self.val(*a, idx);
                let y = self.val(*b, idx);
                self.binary(*o, odt, &x, &y)
            }
            Op::ScalarBinary {
                op,
                x,
                s,
                scalar_left,
            } => {
                let odt = self.vals[*x].dtype;
                let a = self.val(*x, idx);
                let c = self.scalar(s, odt);
                if *scalar_left {
                    self.binary(*op, odt, &c, &a)
                } else {
                    self.binary(*op, odt, &a, &c)
                }
            }
            Op::Select(c, a, b) => {
                let cv = self.val(*c, idx);
                let x = self.val(*a, idx);
                let y = self.val(*b, idx);
                self.b.select(&cv, &x, &y)
            }
            Op::Fill(fdt, _, s) => self.scalar(s, *fdt),
            Op::Iota(idt, _, axis) => {
                let d = self.dims_of(v, idx);
                let kv = match &d[*axis] {
                    k @ Q::Lit(_) => k.v(),
                    k => self.b.add(&k.v(), &V::int(Ty::I64, 0)),
                };
                self.cast(Dtype::I64, *idt, &kv)
            }
            _ => self.load(v, &Q::Lit(0)),
        }
    }

    /// A layout op's element at `idx`: its operand's element at the
    /// rewritten index (§5.6–§5.10); nothing is computed.
    fn layout_val(&mut self, v: Value, op: &Op, idx: &Idx) -> V {
        match op {
            Op::Reshape(_, x) => {
                let lin = match &idx.lin {
                    Some(l) => l.clone(),
                    None => {
                        let d = idx.dims.clone().unwrap_or_default();
                        self.ravel(v, &d)
                    }
                };
                let dims = idx.dims.as_ref().map(|d| self.reshape_index(v, *x, d));
                self.val(
                    *x,
                    &Idx {
                        dims,
                        lin: Some(lin),
                    },
                )
            }
            Op::Transpose(perm, x) => {
                let d = self.dims_of(v, idx);
                let mut src = vec![Q::Lit(0); perm.len()];
                for (j, &p) in perm.iter().enumerate() {
                    src[p] = d[j].clone();
                }
                self.val(
                    *x,
                    &Idx {
                        dims: Some(src),
                        lin: None,
                    },
                )
            }
            Op::Broadcast(_, x) => {
                let d = self.dims_of(v, idx);
                let n = self.vals[*x].shape.len();
                let m = d.len();
                let mut src = Vec::with_capacity(n);
                for k in 0..n {
                    let sd = self.dim(*x, k);
                    let s = match sd.lit() {
                        Some(1) => Q::Lit(0),
                        Some(_) => d[m - n + k].clone(),
                        None => {
                            let (sd, zero) = (sd.v(), V::int(Ty::I64, 0));
                            let one = self.b.hoisted(|b| b.icmp("eq", &sd, &V::int(Ty::I64, 1)));
                            match self.assumed.as_mut() {
                                Some(flags) => {
                                    flags.push(one);
                                    d[m - n + k].clone()
                                }
                                None => Q::of(&self.b.select(&one, &zero, &d[m - n + k].v())),
                            }
                        }
                    };
                    src.push(s);
                }
                self.val(
                    *x,
                    &Idx {
                        dims: Some(src),
                        lin: None,
                    },
                )
            }
            Op::Slice { axis, step, x, .. } => {
                let mut d = self.dims_of(v, idx);
                let s = self.shape_qty(QKey::SliceStart(v));
                // start + i·step < stop ≤ the operand's dim (the rule's bound).
                let i = self.bmul(&d[*axis], &Q::Lit(*step as i64));
                d[*axis] = self.badd(&i, &s);
                self.val(
                    *x,
                    &Idx {
                        dims: Some(d),
                        lin: None,
                    },
                )
            }
            Op::Concat(axis, xs) => self.concat(v, *axis, xs, idx),
            Op::Pad { axis, value, x, .. } => self.pad(v, (*axis, value, *x), idx),
            _ => self.load(v, &Q::Lit(0)),
        }
    }

    /// Element `idx` of `v = rope[layout](x, cos, sin)` (docs/syntax.md
    /// §12e, the interpreter's `denote::rope`): both coordinates of the
    /// element's pair read at rewritten last-axis indices, the products
    /// and the difference or sum computed as the §5.3 binary ops compute
    /// them, and the element's own formula selected by its coordinate
    /// (branch-free, so the loop still vectorizes).
    fn rope(
        &mut self,
        v: Value,
        (layout, x, cos, sin): (RopeLayout, Value, Value, Value),
        idx: &Idx,
    ) -> V {
        use BinaryOp as B;
        let dt = self.vals[v].dtype;
        let d = self.dims_of(v, idx);
        let last = d.len() - 1;
        let j = d[last].v();
        let (one, zero) = (V::int(Ty::I64, 1), V::int(Ty::I64, 0));
        let (p, first, ja, jb) = match layout {
            RopeLayout::Pairs => {
                // j = 2p + (the coordinate): ja = 2p, jb = 2p + 1.
                let p = self.b.lshr(&j, &one);
                let odd = self.b.and(&j, &one);
                let first = self.b.icmp("eq", &odd, &zero);
                let ja = self.b.and(&j, &V::int(Ty::I64, -2));
                let jb = self.b.or(&j, &one);
                (Q::of(&p), first, Q::of(&ja), Q::of(&jb))
            }
            RopeLayout::Halves => {
                let h = self.dim(cos, last);
                let first = self.b.icmp("slt", &j, &h.v());
                let back = self.bsub(&d[last], &h).v();
                let p = Q::of(&self.b.select(&first, &j, &back));
                let jb = self.badd(&p, &h);
                (p.clone(), first, p, jb)
            }
        };
        let at = |k: Q| {
            let mut e = d.clone();
            e[last] = k;
            Idx {
                dims: Some(e),
                lin: None,
            }
        };
        let (ia, ib, ip) = (at(ja), at(jb), at(p));
        let a = self.val(x, &ia);
        let b = self.val(x, &ib);
        let c = self.val(cos, &ip);
        let s = self.val(sin, &ip);
        let ac = self.binary(B::Mul, dt, &a, &c);
        let bs = self.binary(B::Mul, dt, &b, &s);
        let fst = self.binary(B::Sub, dt, &ac, &bs);
        let as_ = self.binary(B::Mul, dt, &a, &s);
        let bc = self.binary(B::Mul, dt, &b, &c);
        let snd = self.binary(B::Add, dt, &as_, &bc);
        self.b.select(&first, &fst, &snd)
    }

    /// Element `idx` of `v = concat(axis, xs)` (§5.10). An operand whose
    /// concat dim is 0 is never read: its buffer may be empty (issue 10
    /// item 5: clamping into `[0, dk − 1]` read index −1). With every dim a
    /// literal (σ-specialised), empty operands are dropped at generation
    /// time and the rest stay branch-free (each read clamped into its
    /// operand, one selected: the loop vectorizes). With run-time dims
    /// (the shape-generic kernel) each operand is read in its own branch,
    /// only when the index falls inside it.
    pub(super) fn concat(&mut self, v: Value, axis: usize, xs: &[Value], idx: &Idx) -> V {
        let d = self.dims_of(v, idx);
        let dks: Vec<Q> = xs.iter().map(|x| self.dim(*x, axis)).collect();
        if dks.iter().any(|dk| dk.lit().is_none()) {
            return self.concat_branches(v, axis, xs, &dks, &d);
        }
        let dt = self.vals[v].dtype;
        let j = d[axis].clone();
        let mut off = Q::Lit(0);
        let mut parts = Vec::new();
        for (x, dk) in xs.iter().zip(&dks) {
            if dk.lit() == Some(0) {
                continue;
            }
            let local = self.bsub(&j, &off).v();
            // Clamp into [0, dk − 1] (dk ≥ 1 here): every non-empty operand
            // is read, only one is selected.
            let zero = V::int(Ty::I64, 0);
            let neg = self.b.icmp("slt", &local, &zero);
            let l0 = self.b.select(&neg, &zero, &local);
            let last = self.padd(dk, &Q::Lit(-1)).v();
            let big = self.b.icmp("sgt", &l0, &last);
            let l1 = self.b.select(&big, &last, &l0);
            let mut sd = d.clone();
            sd[axis] = Q::of(&l1);
            let e = self.val(
                *x,
                &Idx {
                    dims: Some(sd),
                    lin: None,
                },
            );
            let end = self.padd(&off, dk);
            parts.push((e, end.clone()));
            off = end;
        }
        let Some((last, _)) = parts.last().cloned() else {
            // Every operand empty: so is the output, nothing runs this.
            return self.zero_of(dt);
        };
        let mut acc = last;
        for (e, end) in parts.iter().rev().skip(1) {
            let c = self.b.icmp("slt", &j.v(), &end.v());
            acc = self.b.select(&c, e, &acc);
        }
        acc
    }

    /// [`Self::concat`] with run-time dims: a chain of branches, operand k
    /// computed only when `off_k ≤ j < off_k + dk`, merged by a phi. Values
    /// computed inside a branch do not dominate the code after it, so the
    /// memo is restored after each branch.
    pub(super) fn concat_branches(
        &mut self,
        v: Value,
        axis: usize,
        xs: &[Value],
        dks: &[Q],
        d: &[Q],
    ) -> V {
        let dt = self.vals[v].dtype;
        let j = d[axis].clone();
        let l = self.label();
        let saved = self.memo.clone();
        let mut off = Q::Lit(0);
        let mut incoming = Vec::new();
        let merge = self.b.new_block(&format!("Cm{l}"));
        let mut next = None;
        for (k, (x, dk)) in xs.iter().zip(dks).enumerate() {
            let end = self.padd(&off, dk);
            let inside = self.b.icmp("slt", &j.v(), &end.v());
            let (read, read_end, past) = (
                self.b.new_block(&format!("Cb{l}.{k}")),
                self.b.new_block(&format!("Ce{l}.{k}")),
                self.b.new_block(&format!("Cn{l}.{k}")),
            );
            self.b.cond_br(&inside, &read, &past);
            self.b.switch_to(&read);
            let local = self.bsub(&j, &off);
            let mut sd = d.to_vec();
            sd[axis] = local;
            let e = self.val(
                *x,
                &Idx {
                    dims: Some(sd),
                    lin: None,
                },
            );
            self.b.br(&read_end);
            self.b.switch_to(&read_end);
            self.b.br(&merge);
            incoming.push((e, read_end));
            self.memo = saved.clone();
            self.b.switch_to(&past);
            next = Some(past);
            off = end;
        }
        // Past every operand: unreachable for an index inside the output.
        let z = self.zero_of(dt);
        self.b.br(&merge);
        incoming.push((z, next.expect("a concat has an operand")));
        self.b.switch_to(&merge);
        self.b.phi(&incoming)
    }

    /// §12b pad: the operand's element at `j − before` when that is inside
    /// it, else the fill value. A branch, not a clamped read: an empty
    /// operand (`d = 0`, opted in) has nothing to read, and a load must not
    /// be issued for it (the lesson of concat, issue #10 item 5).
    pub(super) fn pad(
        &mut self,
        v: Value,
        (axis, value, x): (usize, &Scalar, Value),
        idx: &Idx,
    ) -> V {
        let dt = self.vals[v].dtype;
        let d = self.dims_of(v, idx);
        let before = self.shape_qty(QKey::PadBefore(v));
        let local = self.bsub(&d[axis], &before);
        let dx = self.dim(x, axis);
        let l = local.v();
        let ge = self.b.icmp("sge", &l, &V::int(Ty::I64, 0));
        let lt = self.b.icmp("slt", &l, &dx.v());
        let inside = self.b.and(&ge, &lt);
        // Computed before the branch, so it dominates the merge.
        let fill = self.scalar(value, dt);
        let mut sd = d.clone();
        sd[axis] = local;
        self.read_if(&inside, x, sd, fill)
    }

    /// `x` at `dims` when `inside`, read in a branch (so an index outside
    /// reads no memory), else `other` (computed before, so it dominates the
    /// merge): pad's and pooling's guarded read.
    pub(super) fn read_if(&mut self, inside: &V, x: Value, dims: Vec<Q>, other: V) -> V {
        let lab = self.label();
        let saved = self.memo.clone();
        let (read, read_end, merge, outside) = (
            self.b.new_block(&format!("Pb{lab}")),
            self.b.new_block(&format!("Pe{lab}")),
            self.b.new_block(&format!("Pm{lab}")),
            self.b.new_block(&format!("Pm{lab}.f")),
        );
        self.b.cond_br(inside, &read, &outside);
        self.b.switch_to(&read);
        let e = self.val(
            x,
            &Idx {
                dims: Some(dims),
                lin: None,
            },
        );
        self.b.br(&read_end);
        self.b.switch_to(&read_end);
        self.b.br(&merge);
        // Values computed inside the branch do not dominate what follows.
        self.memo = saved;
        self.b.switch_to(&outside);
        self.b.br(&merge);
        self.b.switch_to(&merge);
        self.b.phi(&[(e, read_end), (other, outside)])
    }

    /// The zero of `dt`'s computation type, as an operand.
    pub(super) fn zero_of(&mut self, dt: Dtype) -> V {
        match Ty::compute(dt) {
            Ty::Float => self.const_f32(0.0),
            ty => V::int(ty, 0),
        }
    }
}
