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
    pub(super) fn quiet(&mut self, x: &str) -> String {
        let n = self.ins(format!("fcmp uno float {x}, {x}"));
        let q = self.quieted(x);
        self.ins(format!("select i1 {n}, float {q}, float {x}"))
    }

    /// `x` with the quiet bit set, unconditionally (only selected for NaNs).
    pub(super) fn quieted(&mut self, x: &str) -> String {
        let b = self.ins(format!("bitcast float {x} to i32"));
        let o = self.ins(format!("or i32 {b}, {}", cast::QUIET_BIT));
        self.ins(format!("bitcast i32 {o} to float"))
    }

    /// `cast::nan_result(r, operands)`: `r` unless it is a NaN, else the
    /// first NaN operand quieted, else the canonical NaN.
    pub(super) fn nan_result(&mut self, r: &str, operands: &[&str]) -> String {
        let t = self.first_nan(operands);
        let rn = self.ins(format!("fcmp uno float {r}, {r}"));
        self.ins(format!("select i1 {rn}, float {t}, float {r}"))
    }

    /// The first NaN of `operands` quieted, or the canonical NaN.
    pub(super) fn first_nan(&mut self, operands: &[&str]) -> String {
        let mut t = self.fc(cast::CANONICAL_NAN);
        for x in operands.iter().rev() {
            let n = self.ins(format!("fcmp uno float {x}, {x}"));
            let q = self.quieted(x);
            t = self.ins(format!("select i1 {n}, float {q}, float {t}"));
        }
        t
    }

    /// IEEE 754-2019 `maximum`/`minimum` (`cast::maximum`/`minimum`): a NaN
    /// operand wins (the first, quieted); −0 < +0. Compares and selects
    /// (they vectorize; `llvm.maximum` has no fast x86 lowering in LLVM 14):
    /// on equal operands the bitwise and (max) / or (min) of the two picks
    /// +0 / −0 from a ±0 pair and is the identity otherwise.
    pub(super) fn extremum(&mut self, max: bool, a: &str, b: &str) -> String {
        let (win, lose) = if max { ("ogt", "olt") } else { ("olt", "ogt") };
        let ca = self.ins(format!("fcmp {win} float {a}, {b}"));
        let cb = self.ins(format!("fcmp {lose} float {a}, {b}"));
        let ai = self.ins(format!("bitcast float {a} to i32"));
        let bi = self.ins(format!("bitcast float {b} to i32"));
        let tie = if max { "and" } else { "or" };
        let ti = self.ins(format!("{tie} i32 {ai}, {bi}"));
        let tf = self.ins(format!("bitcast i32 {ti} to float"));
        let m1 = self.ins(format!("select i1 {cb}, float {b}, float {tf}"));
        let m = self.ins(format!("select i1 {ca}, float {a}, float {m1}"));
        let u = self.ins(format!("fcmp uno float {a}, {b}"));
        let t = self.first_nan(&[a, b]);
        self.ins(format!("select i1 {u}, float {t}, float {m}"))
    }

    // ---- element expressions ---------------------------------------------

    pub(super) fn fop(&mut self, op: &str, a: &str, b: &str) -> String {
        self.ins(format!("{op} float {a}, {b}"))
    }

    pub(super) fn fcall1(&mut self, name: &str, x: &str) -> String {
        self.ins(format!("call float @llvm.{name}.f32(float {x})"))
    }

    pub(super) fn horner(&mut self, x: &str, cs: &[f32]) -> String {
        let mut acc = self.fc(cs[0]);
        // Fused multiply-adds (the fast transcendentals only): one rounding
        // per step, half the instructions.
        for &c in &cs[1..] {
            let cc = self.fc(c);
            acc = self.ins(format!(
                "call float @llvm.fma.f32(float {acc}, float {x}, float {cc})"
            ));
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
    pub(super) fn fast_exp(&mut self, x: &str) -> String {
        let hi = self.fc(88.722_83);
        let lo = self.fc(-104.0);
        let xc0 = self.fcall2("minnum", x, &hi);
        let xc = self.fcall2("maxnum", &xc0, &lo);
        let log2e = self.fc(std::f32::consts::LOG2_E);
        let t = self.fop("fmul", &xc, &log2e);
        let n = self.fcall1("rint", &t);
        let c1 = self.fc(0.693_359_4);
        let c2 = self.fc(-2.121_944_4e-4);
        let a = self.fop("fmul", &n, &c1);
        let r0 = self.fop("fsub", &xc, &a);
        let b = self.fop("fmul", &n, &c2);
        let r = self.fop("fsub", &r0, &b);
        let p = self.horner(
            &r,
            &[
                1.987_569_1e-4,
                1.398_2e-3,
                8.333_452e-3,
                4.166_579_6e-2,
                1.666_666_5e-1,
                5e-1,
            ],
        );
        let r2 = self.fop("fmul", &r, &r);
        let pr2 = self.fop("fmul", &p, &r2);
        let s0 = self.fop("fadd", &pr2, &r);
        let one = self.fc(1.0);
        let s = self.fop("fadd", &s0, &one);
        // 2^n (n in [-150, 128]) as two normal factors 2^n1 · 2^n2,
        // n1 = ⌊n/2⌋: neither overflows the exponent field, the first
        // product is exact and the second rounds once (onto the subnormal
        // grid when the result is subnormal).
        let ni = self.ins(format!("fptosi float {n} to i32"));
        let n1 = self.ins(format!("ashr i32 {ni}, 1"));
        let n2 = self.ins(format!("sub i32 {ni}, {n1}"));
        let mut y1 = s;
        for k in [n1, n2] {
            let e = self.ins(format!("add i32 {k}, 127"));
            let eb = self.ins(format!("shl i32 {e}, 23"));
            let sc = self.ins(format!("bitcast i32 {eb} to float"));
            y1 = self.fop("fmul", &y1, &sc);
        }
        let under = self.ins(format!("fcmp olt float {x}, {lo}"));
        let zero = self.fc(0.0);
        let y2 = self.ins(format!("select i1 {under}, float {zero}, float {y1}"));
        let over = self.ins(format!("fcmp ogt float {x}, {hi}"));
        let inf = self.fc(f32::INFINITY);
        let y3 = self.ins(format!("select i1 {over}, float {inf}, float {y2}"));
        let nan = self.ins(format!("fcmp uno float {x}, {x}"));
        self.ins(format!("select i1 {nan}, float {x}, float {y3}"))
    }

    pub(super) fn fcall2(&mut self, name: &str, a: &str, b: &str) -> String {
        self.ins(format!("call float @llvm.{name}.f32(float {a}, float {b})"))
    }

    /// Fast f32 `ln` (Cephes `logf`). Error bound: ≤ 2 ulp relative plus
    /// 1e-7 absolute near x = 1 (where ln x crosses 0), subnormal x
    /// included (scaled by 2²³ first); x < 0 → NaN, ±0 → −∞, +∞ → +∞.
    pub(super) fn fast_log(&mut self, x: &str) -> String {
        // Subnormals: scale by 2^23 first.
        let tiny = self.fc(f32::MIN_POSITIVE);
        let is_sub = self.ins(format!("fcmp olt float {x}, {tiny}"));
        let big = self.fc(8_388_608.0);
        let xs = self.fop("fmul", x, &big);
        let xv = self.ins(format!("select i1 {is_sub}, float {xs}, float {x}"));
        let eadj = self.ins(format!("select i1 {is_sub}, i32 -23, i32 0"));
        let b = self.ins(format!("bitcast float {xv} to i32"));
        let eb = self.ins(format!("lshr i32 {b}, 23"));
        let e0 = self.ins(format!("sub i32 {eb}, 126"));
        let e1 = self.ins(format!("add i32 {e0}, {eadj}"));
        let mb0 = self.ins(format!("and i32 {b}, 8388607"));
        let mb = self.ins(format!("or i32 {mb0}, 1056964608"));
        let m = self.ins(format!("bitcast i32 {mb} to float"));
        let sqrthf = self.fc(std::f32::consts::FRAC_1_SQRT_2);
        let lt = self.ins(format!("fcmp olt float {m}, {sqrthf}"));
        let one = self.fc(1.0);
        let m2 = self.fop("fadd", &m, &m);
        let xa = self.fop("fsub", &m2, &one);
        let xb = self.fop("fsub", &m, &one);
        let f = self.ins(format!("select i1 {lt}, float {xa}, float {xb}"));
        let edec = self.ins(format!("sub i32 {e1}, 1"));
        let ei = self.ins(format!("select i1 {lt}, i32 {edec}, i32 {e1}"));
        let e = self.ins(format!("sitofp i32 {ei} to float"));
        let z = self.fop("fmul", &f, &f);
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
        let pf = self.fop("fmul", &p, &f);
        let y0 = self.fop("fmul", &pf, &z);
        let c1 = self.fc(-2.121_944_4e-4);
        let ec1 = self.fop("fmul", &e, &c1);
        let y1 = self.fop("fadd", &y0, &ec1);
        let half = self.fc(-0.5);
        let hz = self.fop("fmul", &z, &half);
        let y2 = self.fop("fadd", &y1, &hz);
        let r0 = self.fop("fadd", &f, &y2);
        let c2 = self.fc(0.693_359_4);
        let ec2 = self.fop("fmul", &e, &c2);
        let r = self.fop("fadd", &r0, &ec2);
        let zero = self.fc(0.0);
        let iszero = self.ins(format!("fcmp oeq float {x}, {zero}"));
        let ninf = self.fc(f32::NEG_INFINITY);
        let r1 = self.ins(format!("select i1 {iszero}, float {ninf}, float {r}"));
        let inf = self.fc(f32::INFINITY);
        let isinf = self.ins(format!("fcmp oeq float {x}, {inf}"));
        let r2 = self.ins(format!("select i1 {isinf}, float {inf}, float {r1}"));
        let bad = self.ins(format!("fcmp ult float {x}, {zero}"));
        let nan = self.fc(f32::NAN);
        let isnan = self.ins(format!("fcmp uno float {x}, {x}"));
        let r3 = self.ins(format!("select i1 {bad}, float {nan}, float {r2}"));
        self.ins(format!("select i1 {isnan}, float {x}, float {r3}"))
    }

    /// Fast f32 `tanh` (Cephes `tanhf`: odd polynomial below 0.625,
    /// `1 − 2/(e^{2|x|}+1)` above). Error bound: relative ≤ 2 ulp below
    /// 0.625 (subnormals: tanh x = x exactly), absolute ≤ 3e-7 above (the
    /// [`Self::fast_exp`] error through `2/(e+1)`); ±1 at ±∞, NaN kept.
    pub(super) fn fast_tanh(&mut self, x: &str) -> String {
        let ax = self.fcall1("fabs", x);
        let z = self.fop("fmul", x, x);
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
        let pz = self.fop("fmul", &p, &z);
        let pzx = self.fop("fmul", &pz, x);
        let small = self.fop("fadd", &pzx, x);
        let two = self.fc(2.0);
        let a2 = self.fop("fmul", &ax, &two);
        let ex = self.fast_exp(&a2);
        let one = self.fc(1.0);
        let d = self.fop("fadd", &ex, &one);
        let q = self.fop("fdiv", &two, &d);
        let l = self.fop("fsub", &one, &q);
        let large = self.fcall2("copysign", &l, x);
        let c = self.fc(0.625);
        let is_small = self.ins(format!("fcmp olt float {ax}, {c}"));
        self.ins(format!(
            "select i1 {is_small}, float {small}, float {large}"
        ))
    }

    /// Fast f32 `erf`: the rational approximation on [-4, 4] used by Eigen
    /// (`generic_fast_erf_float`); error bound ≤ 2 ulp plus 1e-7 absolute
    /// (within [`crate::TOLERANCE`]; the dense sweep in the differential
    /// tests checks it). Exactly ±1 for |x| ≥ 4, where the true value
    /// rounds to ±1 in f32 (1 − erf 4 ≈ 1.5e-8 < 2⁻²⁵), ±∞ included; NaN kept.
    pub(super) fn fast_erf(&mut self, x: &str) -> String {
        let hi = self.fc(4.0);
        let lo = self.fc(-4.0);
        let a0 = self.fcall2("minnum", x, &hi);
        let xc = self.fcall2("maxnum", &a0, &lo);
        let x2 = self.fop("fmul", &xc, &xc);
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
        let px = self.fop("fmul", &p, &xc);
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
        let r = self.fop("fdiv", &px, &q);
        let ax = self.fcall1("fabs", x);
        let sat = self.ins(format!("fcmp oge float {ax}, {hi}"));
        let one = self.fc(1.0);
        let pm1 = self.fcall2("copysign", &one, x);
        let r = self.ins(format!("select i1 {sat}, float {pm1}, float {r}"));
        let nan = self.ins(format!("fcmp uno float {x}, {x}"));
        self.ins(format!("select i1 {nan}, float {x}, float {r}"))
    }
}
