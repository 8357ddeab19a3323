//! Constants, loads and stores, and the dtype encodings (Section 2 §5): F16
//! through LLVM `half`, BF16 by bit arithmetic, F8 through 256-entry decode
//! tables and the runtime's exact store (`tc_runtime::cast::store_bits`),
//! I4 packed two per byte. `round` is the §5 cast applied to a computed
//! f32; `encode` writes a value that is already of the dtype.

use super::*;

impl<'a> Gen<'a> {
    // ---- constants ------------------------------------------------------

    pub(super) fn const_f32(&mut self, x: f32) -> V {
        self.b.const_f32(x)
    }

    pub(super) fn elem_const(&mut self, e: Elem, dt: Dtype) -> V {
        match e {
            Elem::F(x) => self.const_f32(x),
            Elem::I(i) => V::int(Ty::compute(dt), cast::wrap_int(i, dt)),
            Elem::B(b) => V::bool(b),
        }
    }

    pub(super) fn scalar(&mut self, s: &Scalar, dt: Dtype) -> V {
        match s {
            Scalar::Float(x) => self.elem_const(cast::convert(Elem::F(*x as f32), dt), dt),
            Scalar::Int(i) => self.elem_const(cast::convert(Elem::I(*i), dt), dt),
            Scalar::Bool(b) => self.elem_const(cast::convert(Elem::B(*b), dt), dt),
            Scalar::Param(p) => {
                let slot = self
                    .st
                    .slots
                    .iter()
                    .position(|x| *x == (*p, dt))
                    .unwrap_or(0) as i64;
                // The scalar slots hold every param's bits in an `i64`.
                self.b.hoisted(|b| {
                    let sc = V::new(Ty::I64.ptr(), "%sc");
                    let a = b.gep(&sc, &[&V::int(Ty::I64, slot)]);
                    let raw = b.load(&a);
                    match Ty::compute(dt) {
                        Ty::Float => {
                            let w = b.trunc(&raw, Ty::I32);
                            b.bitcast(&w, Ty::Float)
                        }
                        Ty::I64 => raw,
                        ty => b.trunc(&raw, ty),
                    }
                })
            }
        }
    }

    // ---- loads and stores -------------------------------------------------

    /// The 256-entry decode table of an F8 dtype (a global, emitted once).
    pub(super) fn f8_table(&mut self, dt: Dtype) -> V {
        let name = format!("@tab_{}", dt.name());
        if !self.tables.contains(&dt) {
            self.tables.push(dt);
            let items: Vec<String> = (0..256u16)
                .map(|b| {
                    format!(
                        "i32 {}",
                        cast::decode_bits(b, dt).unwrap_or(f32::NAN).to_bits() as i32
                    )
                })
                .collect();
            let _ = writeln!(
                self.globals,
                "{name} = private unnamed_addr constant [256 x i32] [{}], align 64",
                items.join(", ")
            );
        }
        V::new(Ty::Ptr(&Ty::Array(256, &Ty::I32)), name)
    }

    /// F16 storage bits to f32 (`cast::f16_to_f32`, Section 2 §5), in
    /// integer operations that vectorize as `bf16_decode`'s do. Through
    /// `fpext half` plus a NaN test on the float, LLVM converted four lanes
    /// at a time and tested every lane for NaN in scalar code: a generic
    /// kernel widening an f16 KV cache ran at 1.5 ns an element. Normal
    /// numbers move their exponent and mantissa into place; infinities
    /// and NaNs keep their payload, NaNs with the quiet bit set (decoding
    /// quiets a signalling NaN); a subnormal `m · 2⁻²⁴` (`m < 2¹⁰`) is that
    /// product in f32, which is exact.
    pub(super) fn f16_decode(&mut self, h16: &V) -> V {
        let b = &mut self.b;
        let i32c = |v| V::int(Ty::I32, v);
        let w = b.zext(h16, Ty::I32);
        let sign = b.and(&w, &i32c(0x8000));
        let sign = b.shl(&sign, &i32c(16));
        let m = b.and(&w, &i32c(0x7fff));
        let e = b.shl(&m, &i32c(13));
        // (127 − 15) << 23: the exponent rebiased.
        let normal = b.add(&e, &i32c(0x3800_0000));
        let special = b.or(&e, &i32c(0x7f80_0000));
        let quieted = b.or(&special, &i32c(cast::QUIET_BIT as i64));
        let is_nan = b.icmp("ugt", &m, &i32c(0x7c00));
        let special = b.select(&is_nan, &quieted, &special);
        let is_special = b.icmp("uge", &m, &i32c(0x7c00));
        let big = b.select(&is_special, &special, &normal);
        let mf = b.uitofp(&m, Ty::Float);
        let tiny = b.const_f32(f32::from_bits(0x3380_0000)); // 2⁻²⁴
        let sub = b.fmul(&mf, &tiny);
        let sub = b.bitcast(&sub, Ty::I32);
        let is_sub = b.icmp("ult", &m, &i32c(0x400));
        let mag = b.select(&is_sub, &sub, &big);
        let bits = b.or(&mag, &sign);
        b.bitcast(&bits, Ty::Float)
    }

    pub(super) fn bf16_decode(&mut self, b16: &V) -> V {
        let b = &mut self.b;
        let w = b.zext(b16, Ty::I32);
        let m = b.and(&w, &V::int(Ty::I32, 32767));
        let nan = b.icmp("ugt", &m, &V::int(Ty::I32, 32640));
        let q = b.or(&w, &V::int(Ty::I32, 64));
        let s = b.select(&nan, &q, &w);
        let sh = b.shl(&s, &V::int(Ty::I32, 16));
        b.bitcast(&sh, Ty::Float)
    }

    /// `round_to(x, BF16)` as the f32 bits of the BF16 value: round to
    /// nearest even on the upper half (a carry into the exponent gives
    /// the next binade, ∞ past the largest finite); a NaN keeps its
    /// sign and upper payload and is quieted. `bf16_decode ∘ encode` in
    /// fewer operations: the decode's NaN test is redundant on a result
    /// whose NaNs are quiet already.
    fn bf16_round_bits(&mut self, x: &V) -> V {
        let b = &mut self.b;
        let i32c = |v| V::int(Ty::I32, v);
        let bits = b.bitcast(x, Ty::I32);
        let isnan = b.fcmp("uno", x, x);
        let hi = b.lshr(&bits, &i32c(16));
        let lsb = b.and(&hi, &i32c(1));
        let r0 = b.add(&bits, &i32c(32767));
        let r1 = b.add(&r0, &lsb);
        let q = b.or(&bits, &i32c(cast::QUIET_BIT as i64));
        let s = b.select(&isnan, &q, &r1);
        b.and(&s, &i32c(0xffff_0000_u32 as i32 as i64))
    }

    /// The storage bits of a BF16 value held in f32 (the computation
    /// type): its upper half. Exact only for a value that is one, which
    /// every BF16-typed value in a kernel is: loads decode BF16 bits,
    /// every op's result is rounded to its dtype (`round`), constants and
    /// scalar parameters are converted to it, and NaNs come out quiet.
    /// Storing through a full rounding repeated the rounding and the NaN
    /// test (a seventh of a BF16 GELU kernel's vector operations).
    fn bf16_store_bits(&mut self, x: &V) -> V {
        let bits = self.b.bitcast(x, Ty::I32);
        let hi = self.b.lshr(&bits, &V::int(Ty::I32, 16));
        self.b.trunc(&hi, Ty::I16)
    }

    /// The storage bits of a `dt` value held in f32 (Section 2 §5): every
    /// value stored is one already (see [`Gen::bf16_store_bits`]).
    pub(super) fn encode(&mut self, dt: Dtype, x: &V) -> V {
        match dt {
            Dtype::F16 => {
                let h = self.b.fptrunc(x, Ty::Half);
                self.b.bitcast(&h, Ty::I16)
            }
            Dtype::BF16 => self.bf16_store_bits(x),
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let c = V::int(Ty::I32, dtype_code(dt) as i64);
                let r = self.b.call(Ty::I16, "tc_encode", &[&c, x]);
                self.b.trunc(&r, Ty::I8)
            }
            _ => x.clone(),
        }
    }

    /// Decode storage bits of `dt` into f32.
    pub(super) fn decode(&mut self, dt: Dtype, raw: &V) -> V {
        match dt {
            Dtype::F16 => self.f16_decode(raw),
            Dtype::BF16 => self.bf16_decode(raw),
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let tab = self.f8_table(dt);
                let z = self.b.zext(raw, Ty::I64);
                let p = self.b.gep(&tab, &[&V::int(Ty::I64, 0), &z]);
                let bits = self.b.load(&p);
                self.b.bitcast(&bits, Ty::Float)
            }
            _ => raw.clone(),
        }
    }

    /// `round_to(x, dt)`: the value of the nearest `dt` (Section 2 §3, §5).
    pub(super) fn round(&mut self, dt: Dtype, x: &V) -> V {
        match dt {
            Dtype::F16 => {
                // Back through the integer decode, not `fpext`: a NaN test
                // on an `fpext` of a half becomes a test on the half
                // itself, which x86 has no vector compare for, so each lane
                // was tested in scalar code (an f16 elementwise kernel ran
                // 17 times slower than f32).
                let h = self.b.fptrunc(x, Ty::Half);
                let bits = self.b.bitcast(&h, Ty::I16);
                self.f16_decode(&bits)
            }
            Dtype::BF16 => {
                let r = self.bf16_round_bits(x);
                self.b.bitcast(&r, Ty::Float)
            }
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let c = V::int(Ty::I32, dtype_code(dt) as i64);
                self.b.call(Ty::Float, "tc_round_to", &[&c, x])
            }
            Dtype::I4 => {
                let four = V::int(Ty::I8, 4);
                let s = self.b.shl(x, &four);
                self.b.ashr(&s, &four)
            }
            _ => x.clone(),
        }
    }

    pub(super) fn buf(&mut self, v: Value) -> V {
        if let Some(b) = self.bufs.get(&v) {
            return b.clone();
        }
        panic!("no buffer for {v}");
    }

    /// Byte `off >> 1` of an I4 buffer `p`, its address and the shift
    /// (0 or 4, an `i8`) of nibble `off` in it.
    fn nibble(&mut self, p: &V, off: &V) -> (V, V, V) {
        let b = &mut self.b;
        let one = V::int(Ty::I64, 1);
        let bi = b.lshr(off, &one);
        let a = b.gep(p, &[&bi]);
        let byte = b.load(&a);
        let odd = b.and(off, &one);
        let sh64 = b.shl(&odd, &V::int(Ty::I64, 2));
        let sh = b.trunc(&sh64, Ty::I8);
        (a, byte, sh)
    }

    /// Element `off` of `v`'s buffer, in its computation type.
    pub(super) fn load(&mut self, v: Value, off: &Q) -> V {
        let dt = self.vals[v].dtype;
        let p = self.buf(v);
        let off = off.v();
        if dt == Dtype::I4 {
            let (_, byte, sh) = self.nibble(&p, &off);
            let b = &mut self.b;
            let r = b.lshr(&byte, &sh);
            let four = V::int(Ty::I8, 4);
            let l = b.shl(&r, &four);
            return b.ashr(&l, &four);
        }
        let a = self.b.gep(&p, &[&off]);
        let raw = self.b.load(&a);
        match dt {
            Dtype::Bool => self.b.icmp("ne", &raw, &V::int(Ty::I8, 0)),
            d if d.is_float() => self.decode(d, &raw),
            _ => raw,
        }
    }

    /// Store `x` (in `v`'s computation type) as element `off` of `v`'s buffer.
    pub(super) fn store(&mut self, v: Value, off: &Q, x: &V) {
        let dt = self.vals[v].dtype;
        let p = self.buf(v);
        let off = off.v();
        if dt == Dtype::I4 {
            let (a, byte, sh) = self.nibble(&p, &off);
            let b = &mut self.b;
            let i8c = |v| V::int(Ty::I8, v);
            let nib = b.and(x, &i8c(15));
            let nibs = b.shl(&nib, &sh);
            let mask = b.shl(&i8c(15), &sh);
            let keep = b.xor(&mask, &i8c(-1));
            let kept = b.and(&byte, &keep);
            let nb = b.or(&kept, &nibs);
            b.store(&nb, &a);
            return;
        }
        let val = match dt {
            Dtype::Bool => self.b.zext(x, Ty::I8),
            d if d.is_float() => self.encode(d, x),
            _ => x.clone(),
        };
        let a = self.b.gep(&p, &[&off]);
        self.b.store(&val, &a);
    }
}
