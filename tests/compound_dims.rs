//! Shape variables bound through invertible compound dims at a Rust call
//! (Section 2 §18, last bullet): the contract solves `F` from the actual
//! size with exact division and the default `F ≥ 1`, on both backends, and
//! a size that does not invert is `Error::Infer` naming the parameter and
//! the dim, never a panic.

use tc::{tensor_module, with_backend, Backend, Error, Tensor};

#[tensor_module]
pub mod moe {
    use tc::{Dim, Tensor};

    pub const N_EXPERTS: usize = 4;

    /// Mixtral-style fused expert weights: column block `e` is expert `e`.
    #[tensor_fn]
    pub fn expert_sums(w: Tensor![f32; D, N_EXPERTS * F]) -> Tensor![f32; D, N_EXPERTS] {
        sum(reshape(w, [D, N_EXPERTS, F]), [2])
    }

    /// A halo of one on each side: `F + 2` binds `F`.
    #[tensor_fn]
    pub fn interior(x: Tensor![f32; R, F + 2]) -> Tensor![f32; R, F] {
        slice(x, 1, 1, F + 1)
    }

    /// A block count with its exactness stated: `K = 32 · blocks`.
    #[tensor_fn(requires(K % 32 == 0))]
    pub fn per_block(scales: Tensor![f32; N, K / 32]) -> Tensor![f32; N, K / 32] {
        relu(scales)
    }

    /// A dim parameter binds the same way.
    #[tensor_fn]
    pub fn widen(x: Tensor![f32; F], width: Dim![2 * F]) -> Tensor![f32; 2 * F] {
        concat([x, x], 0)
    }
}

fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..n).map(|i| i as f32).collect()).unwrap()
}

/// Run `f` on the interpreter and the JIT; they must agree.
fn both(f: impl Fn() -> Result<Tensor, Error>) -> Result<Tensor, Error> {
    let i = with_backend(Backend::Interpreter, &f);
    let j = with_backend(Backend::Jit, &f);
    match (&i, &j) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.shape(), b.shape());
            assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "the backends report different errors"),
        _ => panic!("one backend failed: interpreter {i:?}, JIT {j:?}"),
    }
    j
}

#[test]
fn fused_expert_weights_bind_f() {
    // D = 2, F = 3: row r, expert e sums columns 3e..3e+3 of row r.
    let w = ramp(&[2, 12]);
    let y = both(|| moe::expert_sums(w.clone())).unwrap();
    assert_eq!(y.shape(), &[2, 4]);
    let want: Vec<f32> = (0..2)
        .flat_map(|r| (0..4).map(move |e| (0..3).map(|k| (r * 12 + e * 3 + k) as f32).sum()))
        .collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
}

#[test]
fn a_width_that_is_not_a_multiple_is_a_typed_error() {
    let w = ramp(&[2, 30]);
    let e = both(|| moe::expert_sums(w.clone())).unwrap_err();
    match &e {
        Error::Infer {
            param,
            axis,
            var,
            found,
            ..
        } => {
            assert_eq!(
                (param.as_str(), *axis, var.as_str(), *found),
                ("w", Some(1), "F", 30)
            );
        }
        other => panic!("expected Error::Infer, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("parameter `w`, dimension 1 (`F * N_EXPERTS`)"),
        "{msg}"
    );
    assert!(msg.contains("30 is not a multiple of 4"), "{msg}");
    // No columns at all would make F = 0, below its default F >= 1.
    let e = both(|| moe::expert_sums(ramp(&[2, 0]))).unwrap_err();
    assert!(matches!(e, Error::Infer { .. }), "{e:?}");
}

#[test]
fn offsets_and_block_counts_bind() {
    let x = ramp(&[2, 5]);
    let y = both(|| moe::interior(x.clone())).unwrap();
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0, 6.0, 7.0, 8.0]
    );
    // 2 columns is F = 0: below the default.
    let e = both(|| moe::interior(ramp(&[1, 2]))).unwrap_err();
    assert!(
        e.to_string()
            .contains("`F` = 0, below the least size `F >= 1`"),
        "{e}"
    );
    let s = ramp(&[1, 3]);
    assert_eq!(both(|| moe::per_block(s.clone())).unwrap().shape(), &[1, 3]);
}

#[test]
fn a_dim_parameter_binds_through_its_compound_dim() {
    let x = ramp(&[3]);
    let y = both(|| moe::widen(x.clone(), 6)).unwrap();
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
    );
    // `F` is bound by `x` (3) first; 7 is then compared, not inverted.
    assert!(both(|| moe::widen(x.clone(), 7)).is_err());
}
