//! Top-k kernels (docs/syntax.md §8a, [`KernelShape::Select`]): per lane
//! along the axis (the outer loop, split across threads), a binary heap of
//! at most `k` element *indices* selects the lane's `k` best in one pass,
//! then a heap sort orders them, best first; the values form copies each
//! selected element. O(d·log k) compares per lane for every `k` (a
//! σ-independent algorithm: the shape-generic kernel serves every σ).
//!
//! The order is the denotation's (`tc_runtime::interp::denote::topk`): a
//! stable sort on argmax's "strictly better" (NaN above every number, −0 =
//! +0), so ties keep the lower index. As a key, (value by that order,
//! index ascending) is a *total* order on a lane's elements, so the `k`
//! best and their order are unique and any correct selection yields the
//! stable sort's prefix: the heap compares (value, index) pairs.
//!
//! The heap lives in an `i64` row laid out like the output: the output
//! itself for the indices form, the kernel's scratch buffer (an extra
//! buffer argument, sized by the executor like the output) for the values
//! form. `x` is materialized (`plan::structure` forces a top-k operand), so
//! each comparison is two loads.

use super::*;

/// One lane's heap: where its slots and its operand elements are.
struct Heap {
    /// The `i64` row holding the heap (slot `j` at `base + j·step`).
    hp: V,
    base: Q,
    step: Q,
    /// The operand and its lane (element `i` at `xbase + i·xstep`).
    x: Value,
    xbase: Q,
    xstep: Q,
}

impl<'a> Gen<'a> {
    /// The kernel body writing `out = topk(x, k, axis)`; `scratch` is the
    /// heap row's buffer parameter for the values form.
    pub(super) fn topk_body(
        &mut self,
        out: Value,
        axis: usize,
        indices: bool,
        x: Value,
        scratch: Option<V>,
    ) {
        let (lane, lp) = self.loop_begin(&Q::reg("%start"), &Q::reg("%end"));
        let src = self.unravel_lane(out, &lane, axis);
        let hp = match scratch {
            Some(s) => s,
            None => self.buf(out),
        };
        let h = Heap {
            hp,
            base: self.ravel(out, &src),
            step: self.stride(out, axis),
            x,
            xbase: self.ravel(x, &src),
            xstep: self.stride(x, axis),
        };
        let k = self.dim(out, axis);
        self.heap_select(&h, &k, axis);
        self.heap_sort(&h, &k);
        if !indices {
            // Each selected element, copied (loaded and stored as every
            // kernel copies an element, so bit-identical to the denotation).
            let (j, lj) = self.loop_begin(&Q::Lit(0), &k);
            let i = self.slot(&h, &j);
            let e = self.elem(&h, &i);
            let off = self.lin(&h.base, &h.step, &j);
            self.store(out, &off, &e);
            self.loop_end(lj);
        }
        self.loop_end(lp);
    }

    /// One pass over the lane: the first `k` indices are pushed, each later
    /// one replaces the root (the worst kept) when better, so the heap ends
    /// holding the `k` best.
    fn heap_select(&mut self, h: &Heap, k: &Q, axis: usize) {
        let a = self.label();
        let np = self.b.alloca(&format!("%hn{a}"), Ty::I64, 8);
        self.b.store(&V::int(Ty::I64, 0), &np);
        let d = self.dim(h.x, axis);
        let (i, li) = self.loop_begin(&Q::Lit(0), &d);
        let n = self.b.load(&np);
        let room = self.b.icmp("slt", &n, &k.v());
        let [push, full, replace, swap, next] =
            ["Hp", "Hr", "Hq", "Hs", "Hx"].map(|s| self.b.new_block(&format!("{s}{a}")));
        self.b.cond_br(&room, &push, &full);
        // Push: the new index at slot n, sifted up.
        self.b.switch_to(&push);
        self.memo.clear();
        let ni = self.b.add(&n, &V::int(Ty::I64, 1));
        self.b.store(&ni, &np);
        self.sift_up(h, &Q::of(&n), &i);
        self.b.br(&next);
        // Full (n = k ≥ 1 here, the branch is taken only when k > 0):
        // replace the root when the new element is better, then sift down.
        self.b.switch_to(&full);
        self.memo.clear();
        let nonempty = self.b.icmp("sgt", &n, &V::int(Ty::I64, 0));
        self.b.cond_br(&nonempty, &replace, &next);
        self.b.switch_to(&replace);
        let root = self.slot(h, &Q::Lit(0));
        let iv = i.v();
        let wins = self.better(h, &iv, &root);
        self.b.cond_br(&wins, &swap, &next);
        self.b.switch_to(&swap);
        self.set_slot(h, &Q::Lit(0), &iv);
        self.sift_down(h, &Q::of(&n));
        self.b.br(&next);
        self.b.switch_to(&next);
        self.memo.clear();
        self.loop_end(li);
    }

    /// In-place heap sort of the `k` kept: the root (the worst) swapped to
    /// the end of a shrinking heap, so the row ends best first.
    fn heap_sort(&mut self, h: &Heap, k: &Q) {
        let last = self.bsub(k, &Q::Lit(1));
        let (t, lt) = self.loop_begin(&Q::Lit(0), &last);
        let e = Q::of(&self.b.sub(&last.v(), &t.v()));
        let top = self.slot(h, &Q::Lit(0));
        let end = self.slot(h, &e);
        self.set_slot(h, &Q::Lit(0), &end);
        self.set_slot(h, &e, &top);
        self.sift_down(h, &e);
        self.loop_end(lt);
    }

    /// Move slot `c`'s index (`i`, already at slot `c`'s place in the
    /// caller's view) up while it is worse than its parent's.
    fn sift_up(&mut self, h: &Heap, c0: &Q, i: &Q) {
        let a = self.label();
        let cp = self.b.alloca(&format!("%uc{a}"), Ty::I64, 8);
        self.b.store(&c0.v(), &cp);
        let iv = i.v();
        let [head, body, swap, exit] =
            ["h", "b", "s", "e"].map(|s| self.b.new_block(&format!("U{a}.{s}")));
        self.b.br(&head);
        self.b.switch_to(&head);
        self.memo.clear();
        let c = self.b.load(&cp);
        let top = self.b.icmp("eq", &c, &V::int(Ty::I64, 0));
        self.b.cond_br(&top, &exit, &body);
        self.b.switch_to(&body);
        let cm = self.b.sub(&c, &V::int(Ty::I64, 1));
        let p = self.b.udiv(&cm, &V::int(Ty::I64, 2));
        let pi = self.slot(h, &Q::of(&p));
        // The parent must stay the worse: move it down when `i` is worse.
        let up = self.better(h, &pi, &iv);
        self.b.cond_br(&up, &swap, &exit);
        self.b.switch_to(&swap);
        self.set_slot(h, &Q::of(&c), &pi);
        self.b.store(&p, &cp);
        self.b.br(&head);
        self.b.switch_to(&exit);
        self.memo.clear();
        let c = self.b.load(&cp);
        self.set_slot(h, &Q::of(&c), &iv);
    }

    /// Sift the root's index down a heap of `m` slots: swapped with its
    /// worse child while that child is worse than it.
    fn sift_down(&mut self, h: &Heap, m: &Q) {
        let a = self.label();
        let cp = self.b.alloca(&format!("%dc{a}"), Ty::I64, 8);
        self.b.store(&V::int(Ty::I64, 0), &cp);
        let mv = m.v();
        let [head, body, swap, exit] =
            ["h", "b", "s", "e"].map(|s| self.b.new_block(&format!("D{a}.{s}")));
        self.b.br(&head);
        self.b.switch_to(&head);
        self.memo.clear();
        let c = self.b.load(&cp);
        // 2c + 1 < m ≤ k: c < k / 2, so no overflow.
        let c2 = self.b.shl(&c, &V::int(Ty::I64, 1));
        let l = self.b.add(&c2, &V::int(Ty::I64, 1));
        let has = self.b.icmp("slt", &l, &mv);
        self.b.cond_br(&has, &body, &exit);
        self.b.switch_to(&body);
        let w = self.worse_child(h, &l, &mv);
        let ci = self.slot(h, &Q::of(&c));
        let wi = self.slot(h, &Q::of(&w));
        let down = self.better(h, &ci, &wi);
        self.b.cond_br(&down, &swap, &exit);
        self.b.switch_to(&swap);
        self.set_slot(h, &Q::of(&c), &wi);
        self.set_slot(h, &Q::of(&w), &ci);
        self.b.store(&w, &cp);
        self.b.br(&head);
        self.b.switch_to(&exit);
        self.memo.clear();
    }

    /// Of the children `l` and `l + 1` (when `< m`), the slot of the worse.
    fn worse_child(&mut self, h: &Heap, l: &V, m: &V) -> V {
        let a = self.label();
        let r = self.b.add(l, &V::int(Ty::I64, 1));
        let has_r = self.b.icmp("slt", &r, m);
        let [pre, right, exit] = ["p", "r", "e"].map(|s| self.b.new_block(&format!("W{a}.{s}")));
        self.b.br(&pre);
        self.b.switch_to(&pre);
        self.b.cond_br(&has_r, &right, &exit);
        self.b.switch_to(&right);
        let li = self.slot(h, &Q::of(l));
        let ri = self.slot(h, &Q::of(&r));
        let rb = self.better(h, &li, &ri);
        let pick = self.b.select(&rb, &r, l);
        self.b.br(&exit);
        self.b.switch_to(&exit);
        self.b.phi(&[(l.clone(), pre), (pick, right)])
    }

    /// Is the element at index `i` better than the one at `j` (`i ≠ j`):
    /// strictly better by argmax's order, or tied with the lower index?
    fn better(&mut self, h: &Heap, i: &V, j: &V) -> V {
        let dt = self.vals[h.x].dtype;
        let a = self.elem(h, i);
        let b = self.elem(h, j);
        let ab = self.strictly_better(dt, &a, &b);
        let ba = self.strictly_better(dt, &b, &a);
        let lower = self.b.icmp("slt", i, j);
        let tie = self.b.xor(&ba, &V::bool(true));
        let tie_lower = self.b.and(&tie, &lower);
        self.b.or(&ab, &tie_lower)
    }

    /// argmax's "strictly better" (`denote::arg_better(true, a, b)`): a NaN
    /// beats every number and no NaN beats a NaN; else `a > b` (signed for
    /// ints; −0 and +0 are equal).
    fn strictly_better(&mut self, dt: Dtype, a: &V, b: &V) -> V {
        if !dt.is_float() {
            return self.b.icmp("sgt", a, b);
        }
        let bnan = self.b.fcmp("uno", b, b);
        let anan = self.b.fcmp("uno", a, a);
        let gt = self.b.fcmp("ogt", a, b);
        let c = self.b.or(&anan, &gt);
        self.b.select(&bnan, &V::bool(false), &c)
    }

    /// `base + j·step` (an offset within the buffer: `j` < the axis).
    fn lin(&mut self, base: &Q, step: &Q, j: &Q) -> Q {
        let m = self.bmul(j, step);
        self.badd(base, &m)
    }

    /// The index held in heap slot `j`.
    fn slot(&mut self, h: &Heap, j: &Q) -> V {
        let off = self.lin(&h.base, &h.step, j);
        let p = self.b.gep(&h.hp, &[&off.v()]);
        self.b.load(&p)
    }

    fn set_slot(&mut self, h: &Heap, j: &Q, i: &V) {
        let off = self.lin(&h.base, &h.step, j);
        let p = self.b.gep(&h.hp, &[&off.v()]);
        self.b.store(i, &p);
    }

    /// Element `i` of the lane, in its computation type.
    fn elem(&mut self, h: &Heap, i: &V) -> V {
        let off = self.lin(&h.xbase, &h.xstep, &Q::of(i));
        self.load(h.x, &off)
    }
}
