//! Float rules and approximations: the NaN rules of Section 2 §3 (quieting,
//! payload of the first NaN operand, IEEE 754-2019 maximum/minimum), and the
//! fast-math polynomial `exp`, `log`, `tanh`, `erf` (error bounds stated
//! at each; `edge_values::fast_approximation_error_bounds` checks them).

use super::*;

impl<'a> Gen<'a> {
    // ---- NaN rules (Section 2 §3; the same rules as `tc_runtime::cast`) ----

    /// `x` with the quiet bit set when it is a NaN (`cast::quiet`). Integer
    /// bit operations: LLVM treats `x · 1` or `fptrunc(fpext x)` as `x` and
    /// would otherwise pass a signalling NaN through.
    pub(super) fn quiet(&mut self, x: &V) -> V {
        let n = self.b.fcmp("uno", x, x);
        let q = self.quieted(x);
        self.b.select(&n, &q, x)
    }

    /// `x` with the quiet bit set, unconditionally (only selected for NaNs).
    pub(super) fn quieted(&mut self, x: &V) -> V {
        let b = self.b.bitcast(x, Ty::I32);
        let o = self.b.or(&b, &V::int(Ty::I32, cast::QUIET_BIT as i64));
        self.b.bitcast(&o, Ty::Float)
    }

    /// `cast::nan_result(r, operands)`: `r` unless it is a NaN, else the
    /// first NaN operand quieted, else the canonical NaN.
    pub(super) fn nan_result(&mut self, r: &V, operands: &[&V]) -> V {
        let t = self.first_nan(operands);
        let rn = self.b.fcmp("uno", r, r);
        self.b.select(&rn, &t, r)
    }

    /// The first NaN of `operands` quieted, or the canonical NaN.
    pub(super) fn first_nan(&mut self, operands: &[&V]) -> V {
        let mut t = self.const_f32(cast::CANONICAL_NAN);
        for x in operands.iter().rev() {
            let n = self.b.fcmp("uno", x, x);
            let q = self.quieted(x);
            t = self.b.select(&n, &q, &t);
        }
        t
    }

    /// IEEE 754-2019 `maximum`/`minimum` (`cast::maximum`/`minimum`): a NaN
    /// operand wins (the first, quieted); −0 < +0. Compares and selects
    /// (they vectorize; `llvm.maximum` has no fast x86 lowering in LLVM 14):
    /// on equal operands the bitwise and (max) / or (min) of the two picks
    /// +0 / −0 from a ±0 pair and is the identity otherwise.
    pub(super) fn extremum(&mut self, max: bool, a: &V, b: &V) -> V {
        let (win, lose) = if max { ("ogt", "olt") } else { ("olt", "ogt") };
        let ca = self.b.fcmp(win, a, b);
        let cb = self.b.fcmp(lose, a, b);
        let ai = self.b.bitcast(a, Ty::I32);
        let bi = self.b.bitcast(b, Ty::I32);
        let ti = if max {
            self.b.and(&ai, &bi)
        } else {
            self.b.or(&ai, &bi)
        };
        let tf = self.b.bitcast(&ti, Ty::Float);
        let m1 = self.b.select(&cb, b, &tf);
        let m = self.b.select(&ca, a, &m1);
        let u = self.b.fcmp("uno", a, b);
        let t = self.first_nan(&[a, b]);
        self.b.select(&u, &t, &m)
    }

    // ---- element expressions ---------------------------------------------

    /// `llvm.{name}.f32(args…)`, a float intrinsic.
    pub(super) fn llvm_f32(&mut self, name: &str, args: &[&V]) -> V {
        for a in args {
            assert!(
                a.ty == Ty::Float,
                "ir: llvm.{name}.f32 of {} {}",
                a.ty,
                a.name
            );
        }
        self.b.call(Ty::Float, &format!("llvm.{name}.f32"), args)
    }

    pub(super) fn horner(&mut self, x: &V, cs: &[f32]) -> V {
        let mut acc = self.const_f32(cs[0]);
        // Fused multiply-adds (the fast transcendentals only): one rounding
        // per step, half the instructions.
        for &c in &cs[1..] {
            let cc = self.const_f32(c);
            acc = self.llvm_f32("fma", &[&acc, x, &cc]);
        }
        acc
    }

    /// Fast f32 `exp` (Cephes `expf`: Cody–Waite reduction, degree-5
    /// polynomial). Error bound: relative ≤ 2 ulp (≤ 2.4e-7) for normal
    /// results (x in [-87.3, 88.72]); for subnormal results (x in
    /// [-103.97, -87.3]) the scaling by 2ⁿ is split into two exact factors
    /// so the result is rounded once onto the subnormal grid: absolute error
    /// ≤ 2⁻¹⁴⁸ there (the interpreter's `exp(-100)` is a subnormal too, not
    /// 0). Exactly 0 below -104 (the true value is under half the smallest
    /// subnormal), +∞ above 88.72, ±∞ and NaN as the interpreter.
    pub(super) fn fast_exp(&mut self, x: &V) -> V {
        use crate::options::fast_exp;
        let hi = self.const_f32(fast_exp::HI);
        let lo = self.const_f32(fast_exp::LO);
        let xc0 = self.llvm_f32("minnum", &[x, &hi]);
        let xc = self.llvm_f32("maxnum", &[&xc0, &lo]);
        let log2e = self.const_f32(std::f32::consts::LOG2_E);
        let t = self.b.fmul(&xc, &log2e);
        let n = self.llvm_f32("rint", &[&t]);
        let c1 = self.const_f32(fast_exp::C1);
        let c2 = self.const_f32(fast_exp::C2);
        let a = self.b.fmul(&n, &c1);
        let r0 = self.b.fsub(&xc, &a);
        let b = self.b.fmul(&n, &c2);
        let r = self.b.fsub(&r0, &b);
        let p = self.horner(&r, &fast_exp::P);
        let r2 = self.b.fmul(&r, &r);
        let pr2 = self.b.fmul(&p, &r2);
        let s0 = self.b.fadd(&pr2, &r);
        let one = self.const_f32(1.0);
        let s = self.b.fadd(&s0, &one);
        // 2^n (n in [-150, 128]) as two normal factors 2^n1 · 2^n2,
        // n1 = ⌊n/2⌋: neither overflows the exponent field, the first
        // product is exact and the second rounds once (onto the subnormal
        // grid when the result is subnormal).
        let ni = self.b.fptosi(&n, Ty::I32);
        let n1 = self.b.ashr(&ni, &V::int(Ty::I32, 1));
        let n2 = self.b.sub(&ni, &n1);
        let mut y1 = s;
        for k in [n1, n2] {
            let e = self.b.add(&k, &V::int(Ty::I32, 127));
            let eb = self.b.shl(&e, &V::int(Ty::I32, 23));
            let sc = self.b.bitcast(&eb, Ty::Float);
            y1 = self.b.fmul(&y1, &sc);
        }
        let under = self.b.fcmp("olt", x, &lo);
        let zero = self.const_f32(0.0);
        let y2 = self.b.select(&under, &zero, &y1);
        let over = self.b.fcmp("ogt", x, &hi);
        let inf = self.const_f32(f32::INFINITY);
        let y3 = self.b.select(&over, &inf, &y2);
        let nan = self.b.fcmp("uno", x, x);
        self.b.select(&nan, x, &y3)
    }

    /// Fast f32 `ln` (Cephes `logf`). Error bound: ≤ 2 ulp relative plus
    /// 1e-7 absolute near x = 1 (where ln x crosses 0), subnormal x
    /// included (scaled by 2²³ first); x < 0 → NaN, ±0 → −∞, +∞ → +∞.
    pub(super) fn fast_log(&mut self, x: &V) -> V {
        // Subnormals: scale by 2^23 first.
        let tiny = self.const_f32(f32::MIN_POSITIVE);
        let is_sub = self.b.fcmp("olt", x, &tiny);
        let big = self.const_f32(8_388_608.0);
        let xs = self.b.fmul(x, &big);
        let xv = self.b.select(&is_sub, &xs, x);
        let eadj = self
            .b
            .select(&is_sub, &V::int(Ty::I32, -23), &V::int(Ty::I32, 0));
        let b = self.b.bitcast(&xv, Ty::I32);
        let eb = self.b.lshr(&b, &V::int(Ty::I32, 23));
        let e0 = self.b.sub(&eb, &V::int(Ty::I32, 126));
        let e1 = self.b.add(&e0, &eadj);
        let mb0 = self.b.and(&b, &V::int(Ty::I32, 8388607));
        let mb = self.b.or(&mb0, &V::int(Ty::I32, 1056964608));
        let m = self.b.bitcast(&mb, Ty::Float);
        let sqrthf = self.const_f32(std::f32::consts::FRAC_1_SQRT_2);
        let lt = self.b.fcmp("olt", &m, &sqrthf);
        let one = self.const_f32(1.0);
        let m2 = self.b.fadd(&m, &m);
        let xa = self.b.fsub(&m2, &one);
        let xb = self.b.fsub(&m, &one);
        let f = self.b.select(&lt, &xa, &xb);
        let edec = self.b.sub(&e1, &V::int(Ty::I32, 1));
        let ei = self.b.select(&lt, &edec, &e1);
        let e = self.b.sitofp(&ei, Ty::Float);
        let z = self.b.fmul(&f, &f);
        let p = self.horner(
            &f,
            &[
                7.037_683_6e-2,
                -1.151_461e-1,
                1.167_699_9e-1,
                -1.242_014_1e-1,
                1.424_932_3e-1,
                -1.666_805_8e-1,
                2.000_071_4e-1,
                -2.499_999_4e-1,
                3.333_333e-1,
            ],
        );
        let pf = self.b.fmul(&p, &f);
        let y0 = self.b.fmul(&pf, &z);
        let c1 = self.const_f32(-2.121_944_4e-4);
        let ec1 = self.b.fmul(&e, &c1);
        let y1 = self.b.fadd(&y0, &ec1);
        let half = self.const_f32(-0.5);
        let hz = self.b.fmul(&z, &half);
        let y2 = self.b.fadd(&y1, &hz);
        let r0 = self.b.fadd(&f, &y2);
        let c2 = self.const_f32(0.693_359_4);
        let ec2 = self.b.fmul(&e, &c2);
        let r = self.b.fadd(&r0, &ec2);
        let zero = self.const_f32(0.0);
        let iszero = self.b.fcmp("oeq", x, &zero);
        let ninf = self.const_f32(f32::NEG_INFINITY);
        let r1 = self.b.select(&iszero, &ninf, &r);
        let inf = self.const_f32(f32::INFINITY);
        let isinf = self.b.fcmp("oeq", x, &inf);
        let r2 = self.b.select(&isinf, &inf, &r1);
        let bad = self.b.fcmp("ult", x, &zero);
        let nan = self.const_f32(f32::NAN);
        let isnan = self.b.fcmp("uno", x, x);
        let r3 = self.b.select(&bad, &nan, &r2);
        self.b.select(&isnan, x, &r3)
    }

    /// Fast f32 `tanh` (Cephes `tanhf`: odd polynomial below 0.625,
    /// `1 − 2/(e^{2|x|}+1)` above). Error bound: relative ≤ 2 ulp below
    /// 0.625 (subnormals: tanh x = x exactly), absolute ≤ 3e-7 above (the
    /// [`Self::fast_exp`] error through `2/(e+1)`); ±1 at ±∞, NaN kept.
    /// The sign is the argument's (Section 4 §5.1: the scalar tanh, which
    /// is odd; the interpreter's `tanh(−0)` is −0): `x + x·p(x²)` is +0 at
    /// −0 (`−0 + +0`), so the result takes `x`'s sign through `copysign`,
    /// which also keeps a −0 that fast-math flags let LLVM fold to +0.
    pub(super) fn fast_tanh(&mut self, x: &V) -> V {
        let ax = self.llvm_f32("fabs", &[x]);
        let z = self.b.fmul(x, x);
        let p = self.horner(
            &z,
            &[
                -5.704_988_7e-3,
                2.063_909e-2,
                -5.373_971_6e-2,
                1.333_144_2e-1,
                -3.333_328e-1,
            ],
        );
        let pz = self.b.fmul(&p, &z);
        let pzx = self.b.fmul(&pz, x);
        let small = self.b.fadd(&pzx, x);
        let two = self.const_f32(2.0);
        let a2 = self.b.fmul(&ax, &two);
        let ex = self.fast_exp(&a2);
        let one = self.const_f32(1.0);
        let d = self.b.fadd(&ex, &one);
        let q = self.b.fdiv(&two, &d);
        let l = self.b.fsub(&one, &q);
        let large = self.llvm_f32("copysign", &[&l, x]);
        let c = self.const_f32(0.625);
        let is_small = self.b.fcmp("olt", &ax, &c);
        let r = self.b.select(&is_small, &small, &large);
        self.llvm_f32("copysign", &[&r, x])
    }

    /// Fast f32 `erf`: the rational approximation on [-4, 4] used by Eigen
    /// (`generic_fast_erf_float`); error bound ≤ 2 ulp plus 1e-7 absolute
    /// (within [`crate::options::TOLERANCE`]; the dense sweep in the differential
    /// tests checks it). Exactly ±1 for |x| ≥ 4, where the true value
    /// rounds to ±1 in f32 (1 − erf 4 ≈ 1.5e-8 < 2⁻²⁵), ±∞ included; NaN kept.
    pub(super) fn fast_erf(&mut self, x: &V) -> V {
        let hi = self.const_f32(4.0);
        let lo = self.const_f32(-4.0);
        let a0 = self.llvm_f32("minnum", &[x, &hi]);
        let xc = self.llvm_f32("maxnum", &[&a0, &lo]);
        let x2 = self.b.fmul(&xc, &xc);
        let p = self.horner(
            &x2,
            &[
                -2.726_142_3e-10,
                2.770_681_4e-8,
                -2.101_024e-6,
                -5.692_506_4e-5,
                -7.349_906_3e-4,
                -2.954_6e-3,
                -1.609_603_3e-2,
            ],
        );
        let px = self.b.fmul(&p, &xc);
        let q = self.horner(
            &x2,
            &[
                -1.456_607_2e-5,
                -2.133_740_6e-4,
                -1.682_827e-3,
                -7.373_329_2e-3,
                -1.426_474e-2,
            ],
        );
        let r = self.b.fdiv(&px, &q);
        let ax = self.llvm_f32("fabs", &[x]);
        let sat = self.b.fcmp("oge", &ax, &hi);
        let one = self.const_f32(1.0);
        let pm1 = self.llvm_f32("copysign", &[&one, x]);
        let r = self.b.select(&sat, &pm1, &r);
        let nan = self.b.fcmp("uno", x, x);
        self.b.select(&nan, x, &r)
    }
}
