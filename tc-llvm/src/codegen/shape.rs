//! Shape quantities in emitted IR: dims, strides, (un)ravelled indices, and
//! the checked-looking index arithmetic a kernel needs. In a σ-specialised
//! kernel they are literals folded here; in the shape-generic one they are
//! loads from the run-time shape table ([`super::QKey`]), except the dims
//! the IR fixes for every σ ([`crate::plan::static_dim`]). Each is a [`Q`]:
//! an `i64` that is either known now or held in a register, so the folding
//! asks the type rather than parsing operand text.

use std::fmt;

use super::*;

/// An `i64` shape or index quantity of a kernel: a literal the code
/// generator folds, or the register holding it at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Q {
    /// Known when the kernel is generated.
    Lit(i64),
    /// An `i64` register (`%name`).
    Reg(String),
}

impl Q {
    /// The `i64` value `v`: its literal when it is one.
    pub(super) fn of(v: &V) -> Q {
        assert_eq!(v.ty, Ty::I64, "codegen: a shape quantity of type {}", v.ty);
        match v.name.parse::<i64>() {
            Ok(n) => Q::Lit(n),
            Err(_) => Q::Reg(v.name.clone()),
        }
    }

    /// The `i64` register `name`.
    pub(super) fn reg(name: &str) -> Q {
        Q::of(&V::i64(name))
    }

    /// Its value when known now.
    pub(super) fn lit(&self) -> Option<i64> {
        match self {
            Q::Lit(n) => Some(*n),
            Q::Reg(_) => None,
        }
    }

    /// As an operand of the builder.
    pub(super) fn v(&self) -> V {
        match self {
            Q::Lit(n) => V::int(Ty::I64, *n),
            Q::Reg(r) => V::i64(r),
        }
    }
}

/// The operand's text, as the builder prints it.
impl fmt::Display for Q {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Q::Lit(n) => write!(f, "{n}"),
            Q::Reg(r) => f.write_str(r),
        }
    }
}

impl<'a> Gen<'a> {
    // ---- shape quantities ---------------------------------------------

    /// A shape quantity: a literal, or (shape-generic) its load from the
    /// run-time shape table, once per kernel.
    pub(super) fn shape_qty(&mut self, k: QKey) -> Q {
        if !self.generic {
            return Q::Lit(k.value(self.vals, self.func, self.sigma));
        }
        let slot = match self.qkeys.iter().position(|x| *x == k) {
            Some(s) => s,
            None => {
                self.qkeys.push(k);
                self.qkeys.len() - 1
            }
        };
        let shp = V::new(Ty::I64.ptr(), "%shp");
        Q::of(&self.b.hoisted(|b| {
            let p = b.gep(&shp, &[&V::int(Ty::I64, slot as i64)]);
            b.load(&p)
        }))
    }

    pub(super) fn dim(&mut self, v: Value, a: usize) -> Q {
        if self.generic {
            let now = self.vals[v].shape.get(a).map(|&d| d as i64);
            // Checked against this σ's extent: a disagreement would be a
            // bug in `static_dim`'s rules, and the load is always right.
            let fixed = crate::plan::static_dim(self.func, v, a);
            if let Some(c) = fixed.filter(|&c| Some(c) == now) {
                return Q::Lit(c);
            }
        }
        self.shape_qty(QKey::Dim(v, a))
    }

    /// `a · b` for a quantity of the whole kernel (hoisted to its entry).
    pub(super) fn pmul(&mut self, a: &Q, b: &Q) -> Q {
        match (a.lit(), b.lit()) {
            (Some(x), Some(y)) => Q::Lit(x.wrapping_mul(y)),
            (Some(1), _) => b.clone(),
            (_, Some(1)) => a.clone(),
            _ => Q::of(&self.b.hoisted(|ir| ir.mul(&a.v(), &b.v()))),
        }
    }

    /// `a + b` for a quantity of the whole kernel (hoisted to its entry).
    pub(super) fn padd(&mut self, a: &Q, b: &Q) -> Q {
        match (a.lit(), b.lit()) {
            (Some(x), Some(y)) => Q::Lit(x.wrapping_add(y)),
            (Some(0), _) => b.clone(),
            (_, Some(0)) => a.clone(),
            _ => Q::of(&self.b.hoisted(|ir| ir.add(&a.v(), &b.v()))),
        }
    }

    /// `a · b` of an index (`nsw`: in-bounds indices do not wrap).
    pub(super) fn bmul(&mut self, a: &Q, b: &Q) -> Q {
        match (a.lit(), b.lit()) {
            (Some(x), Some(y)) => Q::Lit(x.wrapping_mul(y)),
            (Some(0), _) | (_, Some(0)) => Q::Lit(0),
            (Some(1), _) => b.clone(),
            (_, Some(1)) => a.clone(),
            _ => Q::of(&self.b.mul_nsw(&a.v(), &b.v())),
        }
    }

    /// `a + b` of an index (`nsw`).
    pub(super) fn badd(&mut self, a: &Q, b: &Q) -> Q {
        match (a.lit(), b.lit()) {
            (Some(x), Some(y)) => Q::Lit(x.wrapping_add(y)),
            (Some(0), _) => b.clone(),
            (_, Some(0)) => a.clone(),
            _ => Q::of(&self.b.add_nsw(&a.v(), &b.v())),
        }
    }

    /// `a − b` of an index (`nsw`).
    pub(super) fn bsub(&mut self, a: &Q, b: &Q) -> Q {
        match (a.lit(), b.lit()) {
            (Some(x), Some(y)) => Q::Lit(x.wrapping_sub(y)),
            (_, Some(0)) => a.clone(),
            _ => Q::of(&self.b.sub_nsw(&a.v(), &b.v())),
        }
    }

    /// `(a mod d, a / d)`, unsigned (indices and dims are not negative):
    /// one step of unravelling an index.
    pub(super) fn divmod(&mut self, a: &Q, d: &Q) -> (Q, Q) {
        let rem = Q::of(&self.b.urem(&a.v(), &d.v()));
        let quo = Q::of(&self.b.udiv(&a.v(), &d.v()));
        (rem, quo)
    }

    pub(super) fn stride(&mut self, v: Value, i: usize) -> Q {
        let r = self.vals[v].shape.len();
        let mut s = Q::Lit(1);
        for j in (i + 1..r).rev() {
            let d = self.dim(v, j);
            s = self.pmul(&s, &d);
        }
        s
    }

    /// Row-major multi-index of `lin` in the shape of `v`.
    pub(super) fn unravel(&mut self, v: Value, lin: &Q) -> Vec<Q> {
        let r = self.vals[v].shape.len();
        let mut out = vec![Q::Lit(0); r];
        let mut rest = lin.clone();
        for i in (0..r).rev() {
            let d = self.dim(v, i);
            if i == 0 {
                out[i] = rest.clone();
                break;
            }
            if d.lit() == Some(1) {
                out[i] = Q::Lit(0);
                continue;
            }
            (out[i], rest) = self.divmod(&rest, &d);
        }
        out
    }

    pub(super) fn ravel(&mut self, v: Value, dims: &[Q]) -> Q {
        let mut acc = Q::Lit(0);
        for (i, d) in dims.iter().enumerate() {
            let s = self.stride(v, i);
            let m = self.bmul(d, &s);
            acc = self.badd(&acc, &m);
        }
        acc
    }

    /// The index into `x` of element `o` of `v = reshape(x)` (§5.7: the
    /// same row-major linear index). Trailing groups of literal dims with
    /// equal products (`[…, 768]` as `[…, 12, 64]`) map index to index with
    /// constant arithmetic; the rest goes through the linear index of the
    /// leading dims, which does not change along a row's inner loop when
    /// the last axis is in a literal group, so its divisions are per row.
    pub(super) fn reshape_index(&mut self, v: Value, x: Value, o: &[Q]) -> Vec<Q> {
        let ri = self.vals[x].shape.len();
        let mut out = vec![Q::Lit(0); ri];
        let (mut i, mut j) = (ri, o.len());
        while let Some((i0, j0)) = self.literal_group(v, x, i, j) {
            let mut g = Q::Lit(0);
            for (k, ok) in o.iter().enumerate().take(j).skip(j0) {
                let d = self.dim(v, k);
                let m = self.bmul(&g, &d);
                g = self.badd(&m, ok);
            }
            self.unravel_into(x, &g, i0..i, &mut out);
            (i, j) = (i0, j0);
        }
        let mut pre = Q::Lit(0);
        for (k, ok) in o.iter().enumerate().take(j) {
            let d = self.dim(v, k);
            let m = self.bmul(&pre, &d);
            pre = self.badd(&m, ok);
        }
        self.unravel_into(x, &pre, 0..i, &mut out);
        out
    }

    /// The trailing group `(i0, j0)` of `x`'s dims `i0..i` and `v`'s dims
    /// `j0..j`, all literal and of equal products, when there is one.
    fn literal_group(&mut self, v: Value, x: Value, i: usize, j: usize) -> Option<(usize, usize)> {
        let (mut i0, mut j0) = (i.checked_sub(1)?, j.checked_sub(1)?);
        let mut pi = self.dim(x, i0).lit()?;
        let mut pj = self.dim(v, j0).lit()?;
        while pi != pj {
            if pi < pj {
                i0 = i0.checked_sub(1)?;
                pi = pi.checked_mul(self.dim(x, i0).lit()?)?;
            } else {
                j0 = j0.checked_sub(1)?;
                pj = pj.checked_mul(self.dim(v, j0).lit()?)?;
            }
        }
        Some((i0, j0))
    }

    /// `lin` unravelled over `x`'s dims `axes` (row-major) into `out`.
    fn unravel_into(&mut self, x: Value, lin: &Q, axes: std::ops::Range<usize>, out: &mut [Q]) {
        let mut rest = lin.clone();
        for k in axes.clone().rev() {
            if k == axes.start {
                out[k] = rest.clone();
                break;
            }
            let d = self.dim(x, k);
            if d.lit() == Some(1) {
                out[k] = Q::Lit(0);
                continue;
            }
            (out[k], rest) = self.divmod(&rest, &d);
        }
    }

    pub(super) fn dims_of(&mut self, v: Value, idx: &Idx) -> Vec<Q> {
        match &idx.dims {
            Some(d) => d.clone(),
            None => {
                let lin = idx.lin.clone().unwrap_or(Q::Lit(0));
                self.unravel(v, &lin)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantity_is_a_literal_exactly_when_its_operand_is_one() {
        for n in [0, 1, -1, 64, i64::MIN, i64::MAX] {
            let q = Q::of(&V::int(Ty::I64, n));
            assert_eq!(q, Q::Lit(n));
            assert_eq!(q.lit(), Some(n));
            assert_eq!(q.to_string(), n.to_string());
            assert_eq!(q.v(), V::int(Ty::I64, n));
        }
        let r = Q::reg("%iv3");
        assert_eq!(r, Q::Reg("%iv3".into()));
        assert_eq!(r.lit(), None);
        assert_eq!(r.to_string(), "%iv3");
        assert_eq!(Q::of(&r.v()), r);
    }

    #[test]
    #[should_panic(expected = "shape quantity of type")]
    fn a_quantity_is_an_i64() {
        Q::of(&V::int(Ty::I32, 1));
    }
}
