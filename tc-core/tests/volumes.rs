//! A shape's volume is the exact product of its dims (Section 2 §10), so it
//! cannot depend on the order they are multiplied in. Multiplying left to
//! right with overflow checks refused `[2^31, 2^32 + 2, 0, 0]`, whose volume
//! is 0: a prefix overflowed before the 0 was reached (fuzzer seed
//! 4314976623, a reshape of that empty value refused by the interpreter and
//! the JIT alike). These properties hold for every shape, empty or not,
//! with dims up to i64::MAX.

use proptest::prelude::*;

use tc_core::concrete::{self, Operand};
use tc_core::size::volume;
use tc_core::Dtype;

/// Dims that reach the corners: 0, 1, small, around 2^31 and 2^32, and up
/// to i64::MAX.
fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(1i64),
        2i64..64,
        (1i64 << 30)..(1i64 << 33),
        (1i64 << 40)..i64::MAX,
        Just(i64::MAX),
    ]
}

fn wide(dims: &[i64]) -> impl Iterator<Item = i128> + '_ {
    dims.iter().map(|&d| i128::from(d))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Volume is order-independent, 0 exactly when a dim is 0, and
    /// otherwise the product whenever it fits i128.
    #[test]
    fn volume_is_the_exact_product_in_any_order(
        dims in prop::collection::vec(dim(), 0..7),
        rot in 0usize..7,
    ) {
        let v = volume(wide(&dims));
        let mut turned = dims.clone();
        if !turned.is_empty() {
            let k = rot % turned.len();
            turned.rotate_left(k);
        }
        let mut reversed = dims.clone();
        reversed.reverse();
        prop_assert_eq!(v, volume(wide(&turned)));
        prop_assert_eq!(v, volume(wide(&reversed)));
        if dims.contains(&0) {
            prop_assert_eq!(v, Some(0));
        } else {
            // Non-zero dims: every partial product is at most the whole,
            // so a checked product overflows in no order or in every one.
            let direct = wide(&dims).try_fold(1i128, |a, d| a.checked_mul(d));
            prop_assert_eq!(v, direct);
        }
    }

    /// A reshape to the same dims in another order, with 1s inserted, is
    /// accepted exactly when the volume fits i64, empty shapes included,
    /// and keeps the target dims.
    #[test]
    fn reshape_accepts_every_arrangement_of_the_same_volume(
        dims in prop::collection::vec(dim(), 1..6),
        rot in 0usize..6,
        ones in 0usize..3,
    ) {
        let from: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let mut to = dims.clone();
        let k = rot % to.len();
        to.rotate_left(k);
        for i in 0..ones {
            to.insert(i % (to.len() + 1), 1);
        }
        let fits = volume(wide(&dims)).is_some_and(|v| v <= i128::from(i64::MAX));
        let r = concrete::reshape(&to, Operand { dtype: Dtype::F32, shape: &from });
        prop_assert_eq!(r.is_ok(), fits, "reshape {:?} -> {:?}: {:?}", from, to, r);
        if let Ok((_, shape)) = r {
            let want: Vec<usize> = to.iter().map(|&d| d as usize).collect();
            prop_assert_eq!(shape, want);
        }
    }
}

/// The fuzzer's shape, directly.
#[test]
fn an_empty_shape_whose_leading_dims_overflow_reshapes() {
    let from = [1usize << 31, (1usize << 32) + 2, 0, 0];
    let to = [1i64 << 31, (1i64 << 32) + 2, 0, 0, 1];
    let r = concrete::reshape(
        &to,
        Operand {
            dtype: Dtype::I64,
            shape: &from,
        },
    );
    assert_eq!(
        r.map(|(_, s)| s).ok(),
        Some(to.iter().map(|&d| d as usize).collect())
    );
}
