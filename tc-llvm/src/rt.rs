//! Rust helpers called from JIT code (mapped with
//! `ExecutionEngine::add_global_mapping`).
//!
//! They are the *exact* path: each computes precisely what the reference
//! interpreter computes (same Rust expression, same libm), so a kernel that
//! calls them is bit-identical to the interpreter. Kernels use them for
//! transcendentals of the narrow float dtypes (always: Section 2 §3 fixes the
//! bits there, one rounding of the f32 result to the dtype) and of F32 when
//! [`crate::options::JitOptions::fast_math`] is off, and for the F8 encoders.

use tc_core::ir::UnaryOp;
use tc_core::Dtype;
use tc_runtime::cast;
use tc_runtime::interp::denote;

/// Dtype ↔ the `i32` code the IR passes (index in `Dtype::ALL`).
pub(crate) fn dtype_code(dt: Dtype) -> i32 {
    Dtype::ALL.iter().position(|d| *d == dt).unwrap_or(0) as i32
}

fn dtype_of(code: i32) -> Dtype {
    Dtype::ALL.get(code as usize).copied().unwrap_or(Dtype::F32)
}

/// Unary op ↔ code.
pub(crate) fn unary_code(op: UnaryOp) -> i32 {
    UnaryOp::ALL.iter().position(|o| *o == op).unwrap_or(0) as i32
}

/// `op(x)` at F32 exactly as the interpreter's `unary_elem` computes it
/// (transcendentals in f64, rounded once to f32).
extern "C" fn tc_unary_exact(op: i32, x: f32) -> f32 {
    let op = UnaryOp::ALL
        .get(op as usize)
        .copied()
        .unwrap_or(UnaryOp::Neg);
    match denote::unary_elem(op, Dtype::F32, tc_runtime::elem::Elem::F(x)) {
        Ok(tc_runtime::elem::Elem::F(y)) => y,
        _ => f32::NAN,
    }
}

/// `pow` exactly as the interpreter computes it.
extern "C" fn tc_pow_exact(x: f32, y: f32) -> f32 {
    (x as f64).powf(y as f64) as f32
}

/// `round_to(x, dt)` (Section 2 §5).
extern "C" fn tc_round_to(dt: i32, x: f32) -> f32 {
    cast::round_to(x, dtype_of(dt))
}

/// A value's narrow float storage bits, exactly (every stored value is
/// already rounded: `cast::store_bits`, the interpreter's store).
extern "C" fn tc_encode(dt: i32, x: f32) -> u16 {
    cast::store_bits(x, dtype_of(dt)).unwrap_or(0)
}

/// Decode a narrow float dtype's bits.
extern "C" fn tc_decode(dt: i32, bits: u16) -> f32 {
    cast::decode_bits(bits, dtype_of(dt)).unwrap_or(f32::NAN)
}

/// Int → float cast with one rounding from the exact integer (Section 2 §5).
extern "C" fn tc_int_to_float(dt: i32, x: i64) -> f32 {
    cast::int_to_float(x, dtype_of(dt))
}

/// The helper symbols and their addresses.
pub(crate) fn symbols() -> Vec<(&'static str, usize)> {
    vec![
        ("tc_unary_exact", tc_unary_exact as *const () as usize),
        ("tc_pow_exact", tc_pow_exact as *const () as usize),
        ("tc_round_to", tc_round_to as *const () as usize),
        ("tc_encode", tc_encode as *const () as usize),
        ("tc_decode", tc_decode as *const () as usize),
        ("tc_int_to_float", tc_int_to_float as *const () as usize),
    ]
}

/// Their declarations in IR text.
pub(crate) const DECLS: &str = "
declare float @tc_unary_exact(i32, float) #1
declare float @tc_pow_exact(float, float) #1
declare float @tc_round_to(i32, float) #1
declare i16 @tc_encode(i32, float) #1
declare float @tc_decode(i32, i16) #1
declare float @tc_int_to_float(i32, i64) #1
declare float @llvm.maxnum.f32(float, float)
declare float @llvm.minnum.f32(float, float)
declare float @llvm.fabs.f32(float)
declare float @llvm.fma.f32(float, float, float)
declare float @llvm.sqrt.f32(float)
declare double @llvm.sqrt.f64(double)
declare float @llvm.floor.f32(float)
declare float @llvm.ceil.f32(float)
declare float @llvm.rint.f32(float)
declare float @llvm.copysign.f32(float, float)
declare i64 @llvm.fptosi.sat.i64.f32(float)
declare i32 @llvm.fptosi.sat.i32.f32(float)
declare i16 @llvm.fptosi.sat.i16.f32(float)
declare i8 @llvm.fptosi.sat.i8.f32(float)
";
