//! Constants, loads and stores, and the dtype encodings (Section 2 §5): F16
//! through LLVM `half`, BF16 by bit arithmetic, F8 through 256-entry decode
//! tables and the runtime's exact store (`tc_runtime::cast::store_bits`),
//! I4 packed two per byte. `round` is the §5 cast applied to a computed
//! f32; `encode` writes a value that is already of the dtype.

use super::*;

impl<'a> Gen<'a> {
    // ---- constants ------------------------------------------------------

    pub(super) fn fc(&mut self, x: f32) -> String {
        self.pins(format!("bitcast i32 {} to float", x.to_bits() as i32))
    }

    pub(super) fn elem_const(&mut self, e: Elem, dt: Dtype) -> String {
        match e {
            Elem::F(x) => self.fc(x),
            Elem::I(i) => {
                let w = cast::wrap_int(i, dt);
                w.to_string()
            }
            Elem::B(b) => if b { "true" } else { "false" }.to_string(),
        }
    }

    pub(super) fn scalar(&mut self, s: &Scalar, dt: Dtype) -> String {
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
                    .unwrap_or(0);
                let a = self.pins(format!("getelementptr inbounds i64, i64* %sc, i64 {slot}"));
                let raw = self.pins(format!("load i64, i64* {a}, align 8"));
                match cty(dt) {
                    "float" => {
                        let b = self.pins(format!("trunc i64 {raw} to i32"));
                        self.pins(format!("bitcast i32 {b} to float"))
                    }
                    "i64" => raw,
                    ty => self.pins(format!("trunc i64 {raw} to {ty}")),
                }
            }
        }
    }

    // ---- loads and stores -------------------------------------------------

    pub(super) fn f8_table(&mut self, dt: Dtype) -> String {
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
        name
    }

    pub(super) fn bf16_decode(&mut self, b16: &str) -> String {
        let w = self.ins(format!("zext i16 {b16} to i32"));
        let m = self.ins(format!("and i32 {w}, 32767"));
        let nan = self.ins(format!("icmp ugt i32 {m}, 32640"));
        let q = self.ins(format!("or i32 {w}, 64"));
        let s = self.ins(format!("select i1 {nan}, i32 {q}, i32 {w}"));
        let sh = self.ins(format!("shl i32 {s}, 16"));
        self.ins(format!("bitcast i32 {sh} to float"))
    }

    pub(super) fn bf16_encode(&mut self, x: &str) -> String {
        let b = self.ins(format!("bitcast float {x} to i32"));
        let isnan = self.ins(format!("fcmp uno float {x}, {x}"));
        let hi = self.ins(format!("lshr i32 {b}, 16"));
        let nanr = self.ins(format!("or i32 {hi}, 64"));
        let lsb = self.ins(format!("and i32 {hi}, 1"));
        let r0 = self.ins(format!("add i32 {b}, 32767"));
        let r1 = self.ins(format!("add i32 {r0}, {lsb}"));
        let r = self.ins(format!("lshr i32 {r1}, 16"));
        let s = self.ins(format!("select i1 {isnan}, i32 {nanr}, i32 {r}"));
        self.ins(format!("trunc i32 {s} to i16"))
    }

    /// Encode a computed f32 into the storage bits of `dt` (Section 2 §5).
    pub(super) fn encode(&mut self, dt: Dtype, x: &str) -> String {
        match dt {
            Dtype::F16 => {
                let h = self.ins(format!("fptrunc float {x} to half"));
                self.ins(format!("bitcast half {h} to i16"))
            }
            Dtype::BF16 => self.bf16_encode(x),
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let c = dtype_code(dt);
                let r = self.ins(format!("call i16 @tc_encode(i32 {c}, float {x})"));
                self.ins(format!("trunc i16 {r} to i8"))
            }
            _ => x.to_string(),
        }
    }

    /// Decode storage bits of `dt` into f32.
    pub(super) fn decode(&mut self, dt: Dtype, raw: &str) -> String {
        match dt {
            Dtype::F16 => {
                let h = self.ins(format!("bitcast i16 {raw} to half"));
                let x = self.ins(format!("fpext half {h} to float"));
                // Decoding quiets a signalling NaN (cast.rs decode rule).
                // Spelled out: LLVM folds `fptrunc(fpext h)` back into `h`.
                self.quiet(&x)
            }
            Dtype::BF16 => self.bf16_decode(raw),
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let tab = self.f8_table(dt);
                let z = self.ins(format!("zext i8 {raw} to i64"));
                let p = self.ins(format!(
                    "getelementptr inbounds [256 x i32], [256 x i32]* {tab}, i64 0, i64 {z}"
                ));
                let b = self.ins(format!("load i32, i32* {p}, align 4"));
                self.ins(format!("bitcast i32 {b} to float"))
            }
            _ => raw.to_string(),
        }
    }

    /// `round_to(x, dt)`: the value of the nearest `dt` (Section 2 §3, §5).
    pub(super) fn round(&mut self, dt: Dtype, x: &str) -> String {
        match dt {
            Dtype::F32 => x.to_string(),
            Dtype::F16 => {
                let h = self.ins(format!("fptrunc float {x} to half"));
                self.ins(format!("fpext half {h} to float"))
            }
            Dtype::BF16 => {
                let b = self.bf16_encode(x);
                self.bf16_decode(&b)
            }
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let c = dtype_code(dt);
                self.ins(format!("call float @tc_round_to(i32 {c}, float {x})"))
            }
            Dtype::I4 => {
                let s = self.ins(format!("shl i8 {x}, 4"));
                self.ins(format!("ashr i8 {s}, 4"))
            }
            _ => x.to_string(),
        }
    }

    pub(super) fn buf(&mut self, v: Value) -> String {
        if let Some(b) = self.bufs.get(&v.0) {
            return b.clone();
        }
        panic!("no buffer for {v}");
    }

    pub(super) fn load(&mut self, v: Value, off: &str) -> String {
        let dt = self.vals[v.0 as usize].dtype;
        let p = self.buf(v);
        let st = sty(dt);
        if dt == Dtype::I4 {
            let bi = self.ins(format!("lshr i64 {off}, 1"));
            let a = self.ins(format!("getelementptr inbounds i8, i8* {p}, i64 {bi}"));
            let byte = self.ins(format!("load i8, i8* {a}, align 1"));
            let odd = self.ins(format!("and i64 {off}, 1"));
            let sh64 = self.ins(format!("shl i64 {odd}, 2"));
            let sh = self.ins(format!("trunc i64 {sh64} to i8"));
            let r = self.ins(format!("lshr i8 {byte}, {sh}"));
            let l = self.ins(format!("shl i8 {r}, 4"));
            return self.ins(format!("ashr i8 {l}, 4"));
        }
        let a = self.ins(format!("getelementptr inbounds {st}, {st}* {p}, i64 {off}"));
        let raw = self.ins(format!("load {st}, {st}* {a}"));
        match dt {
            Dtype::Bool => self.ins(format!("icmp ne i8 {raw}, 0")),
            d if d.is_float() => self.decode(d, &raw),
            _ => raw,
        }
    }

    pub(super) fn store(&mut self, v: Value, off: &str, x: &str) {
        let dt = self.vals[v.0 as usize].dtype;
        let p = self.buf(v);
        let st = sty(dt);
        if dt == Dtype::I4 {
            let bi = self.ins(format!("lshr i64 {off}, 1"));
            let a = self.ins(format!("getelementptr inbounds i8, i8* {p}, i64 {bi}"));
            let byte = self.ins(format!("load i8, i8* {a}, align 1"));
            let odd = self.ins(format!("and i64 {off}, 1"));
            let sh64 = self.ins(format!("shl i64 {odd}, 2"));
            let sh = self.ins(format!("trunc i64 {sh64} to i8"));
            let nib = self.ins(format!("and i8 {x}, 15"));
            let nibs = self.ins(format!("shl i8 {nib}, {sh}"));
            let mask = self.ins(format!("shl i8 15, {sh}"));
            let keep = self.ins(format!("xor i8 {mask}, -1"));
            let kept = self.ins(format!("and i8 {byte}, {keep}"));
            let nb = self.ins(format!("or i8 {kept}, {nibs}"));
            self.e(format!("store i8 {nb}, i8* {a}, align 1"));
            return;
        }
        let val = match dt {
            Dtype::Bool => self.ins(format!("zext i1 {x} to i8")),
            d if d.is_float() => self.encode(d, x),
            _ => x.to_string(),
        };
        let a = self.ins(format!("getelementptr inbounds {st}, {st}* {p}, i64 {off}"));
        self.e(format!("store {st} {val}, {st}* {a}"));
    }
}
