//! Cumsum kernels (docs/syntax.md §8b, [`KernelShape::Scan`]): an outer
//! loop over the lanes along the axis (split across threads), an inner
//! sequential loop along the lane that folds `sum` in index order and
//! stores every prefix. The accumulator is the reductions' (f32 for every
//! float dtype, the dtype's width for ints), each stored prefix finished as
//! a reduction's result (canonical NaN, one rounding into the dtype), so
//! the result is bit-identical to the interpreter's `denote::cumsum`; the
//! producer of `x` is fused into the inner loop.

use super::*;

impl<'a> Gen<'a> {
    pub(super) fn scan_body(&mut self, out: Value, axis: usize, x: Value) {
        let dt = self.vals[x].dtype;
        let (lane, lp) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
        let mut src = self.unravel_lane(out, &lane, axis);
        let a = self.label();
        let accp = self.b.alloca(&format!("%acc{a}"), Ty::compute(dt), 8);
        let init = self.reduce_init(ReduceOp::Sum, dt, false);
        self.b.store(&init, &accp);
        let d = self.dim(x, axis);
        let (j, lj) = self.loop_begin(&Q::Lit(0), &d);
        src[axis] = j;
        let e = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        let acc = self.b.load(&accp);
        let (nacc, _) = self.reduce_combine(ReduceOp::Sum, dt, false, &acc, &e, "");
        self.b.store(&nacc, &accp);
        let res = self.reduce_finish(ReduceOp::Sum, dt, false, &nacc, None, x, &[]);
        let off = self.ravel(out, &src);
        self.store(out, &off, &res);
        self.loop_end(lj);
        self.loop_end(lp);
    }

    /// The multi-index of lane `lane` of `v` along `axis`: every other axis
    /// unravelled from the lane number (row-major), `axis` itself 0.
    pub(super) fn unravel_lane(&mut self, v: Value, lane: &Q, axis: usize) -> Vec<Q> {
        let r = self.vals[v].shape.len();
        let mut out = vec![Q::Lit(0); r];
        let mut rest = lane.clone();
        let last = (0..r).find(|&i| i != axis);
        for i in (0..r).rev() {
            if i == axis {
                continue;
            }
            if Some(i) == last {
                out[i] = rest.clone();
                break;
            }
            let d = self.dim(v, i);
            if d.lit() == Some(1) {
                continue;
            }
            (out[i], rest) = self.divmod(&rest, &d);
        }
        out
    }
}
