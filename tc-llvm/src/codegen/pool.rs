//! Pooling kernels (docs/syntax.md §12d): the element-at-a-time reduction
//! form ([`KernelShape::Reduce`]) with a window instead of whole axes. Per
//! output element, the taps run in the row-major order of the kernel, as in
//! the interpreter's `denote::pool`; a tap inside the input reads the
//! (possibly fused) operand in a branch, a tap in the padding reads
//! nothing and folds the identity (max: −inf, so it is never chosen) or
//! +0 (avg: the zero padding, `count_include_pad`). The fold is sequential
//! in every mode (no `reassoc`), so the result is bit-identical to the
//! interpreter's.

use tc_core::ir::{PoolKind, Window};

use super::*;

impl<'a> Gen<'a> {
    pub(super) fn pool_body(
        &mut self,
        out: Value,
        kind: PoolKind,
        kernel: &[usize],
        w: &Window,
        x: Value,
    ) {
        let dt = self.vals[x].dtype;
        let (o, l) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
        let od = self.unravel(out, &o);
        let lead = od.len() - kernel.len();
        let rop = match kind {
            PoolKind::Max => ReduceOp::Max,
            PoolKind::Avg => ReduceOp::Sum,
        };
        let a = self.label();
        let keyed = self.reduce_keyed(rop, dt);
        let ty = if keyed { Ty::I32 } else { Ty::compute(dt) };
        let accp = self.b.alloca(&format!("%acc{a}"), ty, 8);
        let nanp = self.b.alloca(&format!("%nan{a}"), Ty::I1, 1);
        let init = self.reduce_init(rop, dt, keyed);
        self.b.store(&init, &accp);
        self.b.store(&V::bool(false), &nanp);
        let mut src = od.clone();
        let mut ls = Vec::new();
        let mut inside: Option<V> = None;
        for (i, &k) in kernel.iter().enumerate() {
            let (iv, li) = self.loop_begin(&Q::Lit(0), &Q::Lit(k as i64));
            ls.push(li);
            // q·stride − padding + k: within i64 (the plan keeps the
            // window constants below 2³¹ and q·stride ≤ S + 2·padding).
            let start = self.bmul(&od[lead + i], &Q::Lit(w.stride[i] as i64));
            let start = self.bsub(&start, &Q::Lit(w.padding[i] as i64));
            let pos = self.badd(&start, &iv);
            let d = self.dim(x, lead + i);
            let p = pos.v();
            let ge = self.b.icmp("sge", &p, &V::int(Ty::I64, 0));
            let lt = self.b.icmp("slt", &p, &d.v());
            let here = self.b.and(&ge, &lt);
            inside = Some(match inside {
                Some(prev) => self.b.and(&prev, &here),
                None => here,
            });
            src[lead + i] = pos;
        }
        let e = self.pool_tap(kind, dt, x, src, inside.expect("a pooling has a kernel"));
        self.fold_into((rop, dt, keyed), (&accp, &nanp), &e, "");
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        let res = self.b.load(&accp);
        let res = match kind {
            PoolKind::Max => {
                let nan = dt.is_float().then(|| self.b.load(&nanp));
                self.reduce_finish(rop, dt, keyed, &res, nan.as_ref(), x, &[])
            }
            PoolKind::Avg => {
                // An index extent (an empty operand's window may be huge).
                let taps = tc_core::size::extent(kernel);
                let c = self.const_f32(taps as f32);
                let mean = self.b.fdiv(&res, &c);
                self.reduce_finish(rop, dt, false, &mean, None, x, &[])
            }
        };
        self.store(out, &o, &res);
        self.loop_end(l);
    }

    /// One tap: `x` at `src` when `inside` (read in a branch, so a tap in
    /// the padding reads no memory), else the fold's neutral padding value.
    fn pool_tap(&mut self, kind: PoolKind, dt: Dtype, x: Value, src: Vec<Q>, inside: V) -> V {
        let pad = match (kind, dt.is_float()) {
            (PoolKind::Max, true) => self.const_f32(f32::NEG_INFINITY),
            (PoolKind::Max, false) => V::int(Ty::compute(dt), int_min(dt)),
            (PoolKind::Avg, _) => self.zero_of(dt),
        };
        self.read_if(&inside, x, src, pad)
    }
}
