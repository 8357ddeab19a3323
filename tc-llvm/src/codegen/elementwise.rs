//! Element expressions: unary, binary and cast per dtype (Section 4 §5.1–§5.3),
//! and `val`, the fused expression tree of one output element, where layout
//! ops (transpose, reshape, broadcast, slice, concat) only rewrite the index.

use super::*;

impl<'a> Gen<'a> {
    pub(super) fn unary(&mut self, op: UnaryOp, dt: Dtype, x: &str) -> String {
        use UnaryOp as U;
        if dt.is_bool() {
            return self.ins(format!("xor i1 {x}, true"));
        }
        if dt.is_int() {
            let ty = cty(dt);
            let r = match op {
                U::Neg => self.ins(format!("sub {ty} 0, {x}")),
                U::Abs => {
                    let n = self.ins(format!("sub {ty} 0, {x}"));
                    let c = self.ins(format!("icmp slt {ty} {x}, 0"));
                    self.ins(format!("select i1 {c}, {ty} {n}, {ty} {x}"))
                }
                _ => {
                    let c = self.ins(format!("icmp sgt {ty} {x}, 0"));
                    self.ins(format!("select i1 {c}, {ty} {x}, {ty} 0"))
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
                    self.ins(format!("fneg float {x}"))
                } else {
                    self.fcall1("fabs", x)
                };
                let q = self.quiet(&r);
                return self.round(dt, &q);
            }
            // relu x = maximum(x, +0) (Section 2 §3): relu(−0) = +0.
            U::Relu => {
                let zero = self.fc(0.0);
                let r = self.extremum(true, x, &zero);
                return self.round(dt, &r);
            }
            U::Sqrt => self.fcall1("sqrt", x),
            U::Recip => {
                let one = self.fc(1.0);
                self.fop("fdiv", &one, x)
            }
            U::Floor => self.fcall1("floor", x),
            U::Ceil => self.fcall1("ceil", x),
            U::Round => self.fcall1("rint", x),
            U::Rsqrt => {
                // Exactly the interpreter's `1.0 / (x as f64).sqrt()` rounded to f32.
                let d = self.ins(format!("fpext float {x} to double"));
                let s = self.ins(format!("call double @llvm.sqrt.f64(double {d})"));
                let q = self.ins(format!("fdiv double 1.0, {s}"));
                self.ins(format!("fptrunc double {q} to float"))
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
                let ax = self.fcall1("fabs", x);
                let n = self.ins(format!("fneg float {ax}"));
                let e = self.fast_exp(&n);
                let one = self.fc(1.0);
                let d = self.fop("fadd", &one, &e);
                let zero = self.fc(0.0);
                let neg = self.ins(format!("fcmp olt float {x}, {zero}"));
                let num = self.ins(format!("select i1 {neg}, float {e}, float {one}"));
                self.fop("fdiv", &num, &d)
            }
            U::Erf if fast => self.fast_erf(x),
            // x·½·(1 + erf(x/√2)) with fast_erf. Error bound: relative ≤ 4
            // ulp (4.8e-7) plus absolute 1e-6 (erf's absolute error times
            // ½|x|, |x| ≤ 5.5, where 1 + erf cancels); −0 below −5.5 (the
            // true value is above −1.1e-7 there), NaN at −∞ (∞ · 0, as the
            // interpreter's formula gives).
            U::Gelu if fast => {
                let k = self.fc(std::f32::consts::FRAC_1_SQRT_2);
                let xs = self.fop("fmul", x, &k);
                let e = self.fast_erf(&xs);
                let one = self.fc(1.0);
                let s = self.fop("fadd", &one, &e);
                let half = self.fc(0.5);
                let hx = self.fop("fmul", x, &half);
                let g = self.fop("fmul", &hx, &s);
                // Far left tail: 1 + erf cancels; gelu(x) < 1e-7 in magnitude there.
                let lim = self.fc(-5.5);
                let tail = self.ins(format!("fcmp olt float {x}, {lim}"));
                let zero = self.fc(0.0);
                let z = self.fop("fmul", x, &zero);
                self.ins(format!("select i1 {tail}, float {z}, float {g}"))
            }
            _ => {
                let c = unary_code(op);
                self.ins(format!("call float @tc_unary_exact(i32 {c}, float {x})"))
            }
        };
        let r = self.nan_result(&r, &[x]);
        self.round(dt, &r)
    }

    pub(super) fn binary(&mut self, op: BinaryOp, dt: Dtype, a: &str, b: &str) -> String {
        use BinaryOp as B;
        let ty = cty(dt);
        if dt.is_bool() {
            return match op {
                B::And => self.ins(format!("and i1 {a}, {b}")),
                B::Or => self.ins(format!("or i1 {a}, {b}")),
                B::Xor => self.ins(format!("xor i1 {a}, {b}")),
                B::Eq => self.ins(format!("icmp eq i1 {a}, {b}")),
                B::Ne => self.ins(format!("icmp ne i1 {a}, {b}")),
                B::Lt => self.ins(format!("icmp ult i1 {a}, {b}")),
                B::Le => self.ins(format!("icmp ule i1 {a}, {b}")),
                B::Gt => self.ins(format!("icmp ugt i1 {a}, {b}")),
                _ => self.ins(format!("icmp uge i1 {a}, {b}")),
            };
        }
        if dt.is_int() {
            let r = match op {
                B::Add => self.ins(format!("add {ty} {a}, {b}")),
                B::Sub => self.ins(format!("sub {ty} {a}, {b}")),
                B::Mul => self.ins(format!("mul {ty} {a}, {b}")),
                B::Div | B::Rem => {
                    // ÷0 = 0; MIN ÷ −1 wraps (Section 2 §3); no UB divisor reaches sdiv.
                    let z = self.ins(format!("icmp eq {ty} {b}, 0"));
                    let m1 = self.ins(format!("icmp eq {ty} {b}, -1"));
                    let bad = self.ins(format!("or i1 {z}, {m1}"));
                    let safe = self.ins(format!("select i1 {bad}, {ty} 1, {ty} {b}"));
                    if op == B::Div {
                        let q = self.ins(format!("sdiv {ty} {a}, {safe}"));
                        let n = self.ins(format!("sub {ty} 0, {a}"));
                        let q1 = self.ins(format!("select i1 {m1}, {ty} {n}, {ty} {q}"));
                        self.ins(format!("select i1 {z}, {ty} 0, {ty} {q1}"))
                    } else {
                        let r = self.ins(format!("srem {ty} {a}, {safe}"));
                        self.ins(format!("select i1 {bad}, {ty} 0, {ty} {r}"))
                    }
                }
                B::Max => {
                    let c = self.ins(format!("icmp sgt {ty} {a}, {b}"));
                    self.ins(format!("select i1 {c}, {ty} {a}, {ty} {b}"))
                }
                B::Min => {
                    let c = self.ins(format!("icmp slt {ty} {a}, {b}"));
                    self.ins(format!("select i1 {c}, {ty} {a}, {ty} {b}"))
                }
                B::Eq => return self.ins(format!("icmp eq {ty} {a}, {b}")),
                B::Ne => return self.ins(format!("icmp ne {ty} {a}, {b}")),
                B::Lt => return self.ins(format!("icmp slt {ty} {a}, {b}")),
                B::Le => return self.ins(format!("icmp sle {ty} {a}, {b}")),
                B::Gt => return self.ins(format!("icmp sgt {ty} {a}, {b}")),
                B::Ge => return self.ins(format!("icmp sge {ty} {a}, {b}")),
                _ => return "0".into(),
            };
            return self.round(dt, &r);
        }
        let r = match op {
            B::Add => self.fop("fadd", a, b),
            B::Sub => self.fop("fsub", a, b),
            B::Mul => self.fop("fmul", a, b),
            B::Div => self.fop("fdiv", a, b),
            B::Max | B::Min => {
                let m = self.extremum(op == B::Max, a, b);
                return self.round(dt, &m);
            }
            B::Pow => self.ins(format!("call float @tc_pow_exact(float {a}, float {b})")),
            B::Eq => return self.ins(format!("fcmp oeq float {a}, {b}")),
            B::Ne => return self.ins(format!("fcmp une float {a}, {b}")),
            B::Lt => return self.ins(format!("fcmp olt float {a}, {b}")),
            B::Le => return self.ins(format!("fcmp ole float {a}, {b}")),
            B::Gt => return self.ins(format!("fcmp ogt float {a}, {b}")),
            B::Ge => return self.ins(format!("fcmp oge float {a}, {b}")),
            _ => return self.fc(0.0),
        };
        let r = self.nan_result(&r, &[a, b]);
        self.round(dt, &r)
    }

    /// `cast[to]` on a computed element of dtype `from` (Section 2 §5).
    pub(super) fn cast(&mut self, from: Dtype, to: Dtype, x: &str) -> String {
        if from.is_float() && to.is_float() {
            // `cast_value`: a NaN operand is quieted (Section 2 §3), also
            // for a same-dtype cast.
            let q = self.quiet(x);
            return self.round(to, &q);
        }
        if from == to {
            return x.to_string();
        }
        let (ft, tt) = (cty(from), cty(to));
        if from.is_float() {
            if to.is_bool() {
                let z = self.fc(0.0);
                return self.ins(format!("fcmp une float {x}, {z}"));
            }
            // Truncate toward zero, saturate, NaN → 0 (Rust `as`).
            let r = self.ins(format!("call {tt} @llvm.fptosi.sat.{tt}.f32(float {x})"));
            if to == Dtype::I4 {
                let lo = self.ins(format!("icmp slt i8 {r}, -8"));
                let r1 = self.ins(format!("select i1 {lo}, i8 -8, i8 {r}"));
                let hi = self.ins(format!("icmp sgt i8 {r1}, 7"));
                return self.ins(format!("select i1 {hi}, i8 7, i8 {r1}"));
            }
            return r;
        }
        if from.is_bool() {
            if to.is_float() {
                return self.ins(format!("uitofp i1 {x} to float"));
            }
            return self.ins(format!("zext i1 {x} to {tt}"));
        }
        // From an int.
        if to.is_bool() {
            return self.ins(format!("icmp ne {ft} {x}, 0"));
        }
        if to.is_float() {
            if to == Dtype::F32 {
                return self.ins(format!("sitofp {ft} {x} to float"));
            }
            if matches!(from, Dtype::I8 | Dtype::I4 | Dtype::I16) {
                // Exact in f32, so one rounding into the narrow dtype.
                let f = self.ins(format!("sitofp {ft} {x} to float"));
                return self.round(to, &f);
            }
            let w = if ft == "i64" {
                x.to_string()
            } else {
                self.ins(format!("sext {ft} {x} to i64"))
            };
            let c = dtype_code(to);
            return self.ins(format!("call float @tc_int_to_float(i32 {c}, i64 {w})"));
        }
        // int → int: sign-extend or keep the low bits.
        let bits = |t: &str| t[1..].parse::<u32>().unwrap_or(64);
        let r = if bits(ft) < bits(tt) {
            self.ins(format!("sext {ft} {x} to {tt}"))
        } else if bits(ft) > bits(tt) {
            self.ins(format!("trunc {ft} {x} to {tt}"))
        } else {
            x.to_string()
        };
        if to == Dtype::I4 {
            return self.round(Dtype::I4, &r);
        }
        r
    }

    /// The element of `v` at `idx`, in its computation type.
    pub(super) fn val(&mut self, v: Value, idx: &Idx) -> String {
        let key = format!("{}|{:?}|{:?}", v.0, idx.dims, idx.lin);
        if let Some(r) = self.memo.get(&key) {
            return r.clone();
        }
        let r = self.val_uncached(v, idx);
        self.memo.insert(key, r.clone());
        r
    }

    /// Element `idx` of a value that has a buffer (a parameter, a
    /// materialised value, or a group member stashed in `m`): its load.
    fn load_at(&mut self, v: Value, idx: &Idx) -> String {
        let off = match &idx.lin {
            Some(l) => l.clone(),
            None => {
                let d = idx.dims.clone().unwrap_or_default();
                self.ravel(v, &d)
            }
        };
        self.load(v, &off)
    }

    pub(super) fn val_uncached(&mut self, v: Value, idx: &Idx) -> String {
        let i = v.0 as usize;
        if let Some((x, m)) = self.stashed {
            if x == v.0 {
                // Same shape as `m`: the same linear index.
                return self.load_at(m, idx);
            }
        }
        if i < self.np || (self.st.mat[i] && self.root != Some(v.0)) {
            return self.load_at(v, idx);
        }
        let func = self.func;
        let op = &func.body[i - self.np].op;
        match op {
            Op::Reshape(..)
            | Op::Transpose(..)
            | Op::Broadcast(..)
            | Op::Slice { .. }
            | Op::Concat(..) => self.layout_val(v, op, idx),
            Op::Matmul(..)
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Call(..)
            | Op::Dim(_) => {
                // Always materialized (a dim value is read by calls only,
                // `ir::verify_structure`); unreachable by construction.
                self.load(v, "0")
            }
            _ => self.compute_val(v, op, idx),
        }
    }

    /// An elementwise op's element at `idx`: its operands' elements at the
    /// same index, computed (§5.1–§5.3), or a fill / iota value.
    fn compute_val(&mut self, v: Value, op: &Op, idx: &Idx) -> String {
        let dt = self.vals[v.0 as usize].dtype;
        match op {
            Op::Unary(u, x) => {
                let a = self.val(*x, idx);
                self.unary(*u, dt, &a)
            }
            Op::Cast(to, x) => {
                let from = self.vals[x.0 as usize].dtype;
                let a = self.val(*x, idx);
                self.cast(from, *to, &a)
            }
            Op::Binary(o, a, b) => {
                let odt = self.vals[a.0 as usize].dtype;
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
                let odt = self.vals[x.0 as usize].dtype;
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
                let ty = cty(dt);
                self.ins(format!("select i1 {cv}, {ty} {x}, {ty} {y}"))
            }
            Op::Fill(fdt, _, s) => self.scalar(s, *fdt),
            Op::Iota(idt, _, axis) => {
                let d = self.dims_of(v, idx);
                let k = d[*axis].clone();
                let kv = if is_lit(&k).is_some() {
                    k
                } else {
                    self.ins(format!("add i64 {k}, 0"))
                };
                self.cast(Dtype::I64, *idt, &kv)
            }
            _ => self.load(v, "0"),
        }
    }

    /// A layout op's element at `idx`: its operand's element at the
    /// rewritten index (§5.6–§5.10); nothing is computed.
    fn layout_val(&mut self, v: Value, op: &Op, idx: &Idx) -> String {
        match op {
            Op::Reshape(_, x) => {
                let lin = match &idx.lin {
                    Some(l) => l.clone(),
                    None => {
                        let d = idx.dims.clone().unwrap_or_default();
                        self.ravel(v, &d)
                    }
                };
                self.val(
                    *x,
                    &Idx {
                        dims: None,
                        lin: Some(lin),
                    },
                )
            }
            Op::Transpose(perm, x) => {
                let d = self.dims_of(v, idx);
                let mut src = vec![String::new(); perm.len()];
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
                let n = self.vals[x.0 as usize].shape.len();
                let m = d.len();
                let mut src = Vec::with_capacity(n);
                for k in 0..n {
                    let sd = self.dim(*x, k);
                    let s = match is_lit(&sd) {
                        Some(1) => "0".to_string(),
                        Some(_) => d[m - n + k].clone(),
                        None => {
                            let one = self.pins(format!("icmp eq i64 {sd}, 1"));
                            self.ins(format!("select i1 {one}, i64 0, i64 {}", d[m - n + k]))
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
            Op::Slice { axis, x, .. } => {
                let mut d = self.dims_of(v, idx);
                let s = self.q(QKey::SliceStart(v.0));
                d[*axis] = self.badd(&d[*axis], &s);
                self.val(
                    *x,
                    &Idx {
                        dims: Some(d),
                        lin: None,
                    },
                )
            }
            Op::Concat(axis, xs) => self.concat(v, *axis, xs, idx),
            _ => self.load(v, "0"),
        }
    }

    /// Element `idx` of `v = concat(axis, xs)` (§5.10). An operand whose
    /// concat dim is 0 is never read: its buffer may be empty (issue 10
    /// item 5: clamping into `[0, dk − 1]` read index −1). With every dim a
    /// literal (σ-specialised), empty operands are dropped at generation
    /// time and the rest stay branch-free (each read clamped into its
    /// operand, one selected: the loop vectorizes). With run-time dims
    /// (the shape-generic kernel) each operand is read in its own branch,
    /// only when the index falls inside it.
    pub(super) fn concat(&mut self, v: Value, axis: usize, xs: &[Value], idx: &Idx) -> String {
        let d = self.dims_of(v, idx);
        let dks: Vec<String> = xs.iter().map(|x| self.dim(*x, axis)).collect();
        if dks.iter().any(|dk| is_lit(dk).is_none()) {
            return self.concat_branches(v, axis, xs, &dks, &d);
        }
        let dt = self.vals[v.0 as usize].dtype;
        let ty = cty(dt);
        let j = d[axis].clone();
        let mut off = "0".to_string();
        let mut parts = Vec::new();
        for (x, dk) in xs.iter().zip(&dks) {
            if is_lit(dk) == Some(0) {
                continue;
            }
            let local = self.bsub(&j, &off);
            // Clamp into [0, dk − 1] (dk ≥ 1 here): every non-empty operand
            // is read, only one is selected.
            let neg = self.ins(format!("icmp slt i64 {local}, 0"));
            let l0 = self.ins(format!("select i1 {neg}, i64 0, i64 {local}"));
            let last = self.padd(dk, "-1");
            let big = self.ins(format!("icmp sgt i64 {l0}, {last}"));
            let l1 = self.ins(format!("select i1 {big}, i64 {last}, i64 {l0}"));
            let mut sd = d.clone();
            sd[axis] = l1;
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
            let c = self.ins(format!("icmp slt i64 {j}, {end}"));
            acc = self.ins(format!("select i1 {c}, {ty} {e}, {ty} {acc}"));
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
        dks: &[String],
        d: &[String],
    ) -> String {
        let dt = self.vals[v.0 as usize].dtype;
        let ty = cty(dt);
        let j = d[axis].clone();
        let l = self.label();
        let saved = self.memo.clone();
        let mut off = "0".to_string();
        let mut incoming = Vec::new();
        for (k, (x, dk)) in xs.iter().zip(dks).enumerate() {
            let end = self.padd(&off, dk);
            let inside = self.ins(format!("icmp slt i64 {j}, {end}"));
            self.e(format!(
                "br i1 {inside}, label %Cb{l}.{k}, label %Cn{l}.{k}"
            ));
            let _ = writeln!(self.body, "Cb{l}.{k}:");
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
            self.e(format!("br label %Ce{l}.{k}"));
            let _ = writeln!(self.body, "Ce{l}.{k}:");
            self.e(format!("br label %Cm{l}"));
            incoming.push(format!("[ {e}, %Ce{l}.{k} ]"));
            self.memo = saved.clone();
            let _ = writeln!(self.body, "Cn{l}.{k}:");
            off = end;
        }
        // Past every operand: unreachable for an index inside the output.
        let z = self.zero_of(dt);
        self.e(format!("br label %Cm{l}"));
        incoming.push(format!("[ {z}, %Cn{l}.{} ]", xs.len() - 1));
        let _ = writeln!(self.body, "Cm{l}:");
        self.ins(format!("phi {ty} {}", incoming.join(", ")))
    }

    /// The zero of `dt`'s computation type, as an operand.
    pub(super) fn zero_of(&mut self, dt: Dtype) -> String {
        match cty(dt) {
            "float" => self.fc(0.0),
            "i1" => "false".into(),
            _ => "0".into(),
        }
    }
}
