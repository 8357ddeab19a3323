//! Shape quantities in emitted IR: dims, strides, (un)ravelled indices, and
//! the checked-looking index arithmetic a kernel needs. In a σ-specialised
//! kernel they are literals LLVM folds; in the shape-generic one they are
//! loads from the run-time shape table ([`super::QKey`]), except the dims
//! the IR fixes for every σ ([`crate::plan::static_dim`]).

use super::*;

impl<'a> Gen<'a> {
    // ---- shape quantities ---------------------------------------------

    /// A shape quantity: a literal, or (shape-generic) its load from the
    /// run-time shape table, once per kernel.
    pub(super) fn shape_qty(&mut self, k: QKey) -> String {
        if !self.generic {
            return k.value(self.vals, self.func, self.sigma).to_string();
        }
        let slot = match self.qkeys.iter().position(|x| *x == k) {
            Some(s) => s,
            None => {
                self.qkeys.push(k);
                self.qkeys.len() - 1
            }
        };
        let shp = V::new(Ty::I64.ptr(), "%shp");
        self.b.hoisted(|b| {
            let p = b.gep(&shp, &[&V::int(Ty::I64, slot as i64)]);
            b.load(&p).name
        })
    }

    pub(super) fn dim(&mut self, v: Value, a: usize) -> String {
        if self.generic {
            let now = self.vals[v].shape.get(a).map(|&d| d as i64);
            // Checked against this σ's extent: a disagreement would be a
            // bug in `static_dim`'s rules, and the load is always right.
            let fixed = crate::plan::static_dim(self.func, v, a);
            if let Some(c) = fixed.filter(|&c| Some(c) == now) {
                return c.to_string();
            }
        }
        self.shape_qty(QKey::Dim(v, a))
    }

    pub(super) fn pmul(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_mul(y).to_string(),
            (Some(1), _) => b.to_string(),
            (_, Some(1)) => a.to_string(),
            _ => self.b.hoisted(|ir| ir.mul(&V::i64(a), &V::i64(b)).name),
        }
    }

    pub(super) fn padd(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_add(y).to_string(),
            (Some(0), _) => b.to_string(),
            (_, Some(0)) => a.to_string(),
            _ => self.b.hoisted(|ir| ir.add(&V::i64(a), &V::i64(b)).name),
        }
    }

    pub(super) fn bmul(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_mul(y).to_string(),
            (Some(0), _) | (_, Some(0)) => "0".into(),
            (Some(1), _) => b.to_string(),
            (_, Some(1)) => a.to_string(),
            _ => self.b.mul_nsw(&V::i64(a), &V::i64(b)).name,
        }
    }

    pub(super) fn badd(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_add(y).to_string(),
            (Some(0), _) => b.to_string(),
            (_, Some(0)) => a.to_string(),
            _ => self.b.add_nsw(&V::i64(a), &V::i64(b)).name,
        }
    }

    pub(super) fn bsub(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_sub(y).to_string(),
            (_, Some(0)) => a.to_string(),
            _ => self.b.sub_nsw(&V::i64(a), &V::i64(b)).name,
        }
    }

    pub(super) fn stride(&mut self, v: Value, i: usize) -> String {
        let r = self.vals[v].shape.len();
        let mut s = "1".to_string();
        for j in (i + 1..r).rev() {
            let d = self.dim(v, j);
            s = self.pmul(&s, &d);
        }
        s
    }

    /// Row-major multi-index of `lin` in the shape of `v`.
    pub(super) fn unravel(&mut self, v: Value, lin: &str) -> Vec<String> {
        let r = self.vals[v].shape.len();
        let mut out = vec![String::new(); r];
        let mut rest = lin.to_string();
        for i in (0..r).rev() {
            let d = self.dim(v, i);
            if i == 0 {
                out[i] = rest.clone();
                break;
            }
            if is_lit(&d) == Some(1) {
                out[i] = "0".into();
                continue;
            }
            out[i] = self.b.urem(&V::i64(&rest), &V::i64(&d)).name;
            rest = self.b.udiv(&V::i64(&rest), &V::i64(&d)).name;
        }
        out
    }

    pub(super) fn ravel(&mut self, v: Value, dims: &[String]) -> String {
        let mut acc = "0".to_string();
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
    pub(super) fn reshape_index(&mut self, v: Value, x: Value, o: &[String]) -> Vec<String> {
        let ri = self.vals[x].shape.len();
        let mut out = vec!["0".to_string(); ri];
        let (mut i, mut j) = (ri, o.len());
        while let Some((i0, j0)) = self.literal_group(v, x, i, j) {
            let mut g = "0".to_string();
            for (k, ok) in o.iter().enumerate().take(j).skip(j0) {
                let d = self.dim(v, k);
                let m = self.bmul(&g, &d);
                g = self.badd(&m, ok);
            }
            self.unravel_into(x, &g, i0..i, &mut out);
            (i, j) = (i0, j0);
        }
        let mut pre = "0".to_string();
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
        let mut pi = is_lit(&self.dim(x, i0))?;
        let mut pj = is_lit(&self.dim(v, j0))?;
        while pi != pj {
            if pi < pj {
                i0 = i0.checked_sub(1)?;
                pi = pi.checked_mul(is_lit(&self.dim(x, i0))?)?;
            } else {
                j0 = j0.checked_sub(1)?;
                pj = pj.checked_mul(is_lit(&self.dim(v, j0))?)?;
            }
        }
        Some((i0, j0))
    }

    /// `lin` unravelled over `x`'s dims `axes` (row-major) into `out`.
    fn unravel_into(
        &mut self,
        x: Value,
        lin: &str,
        axes: std::ops::Range<usize>,
        out: &mut [String],
    ) {
        let mut rest = lin.to_string();
        for k in axes.clone().rev() {
            if k == axes.start {
                out[k] = rest.clone();
                break;
            }
            let d = self.dim(x, k);
            if is_lit(&d) == Some(1) {
                out[k] = "0".into();
                continue;
            }
            out[k] = self.b.urem(&V::i64(&rest), &V::i64(&d)).name;
            rest = self.b.udiv(&V::i64(&rest), &V::i64(&d)).name;
        }
    }

    pub(super) fn dims_of(&mut self, v: Value, idx: &Idx) -> Vec<String> {
        match &idx.dims {
            Some(d) => d.clone(),
            None => {
                let lin = idx.lin.clone().unwrap_or_else(|| "0".into());
                self.unravel(v, &lin)
            }
        }
    }
}
