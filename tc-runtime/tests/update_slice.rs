//! `Tensor::update_slice` (issue #15, a decoder's KV cache written in
//! place): for every dtype, layout, axis, block and way of sharing the
//! storage, the result is the interpreter's
//! `concat([slice(self, ..start), src, slice(self, start + len..)])`; it
//! is in place exactly when nothing else holds the storage; another handle
//! never sees the write; a refused write changes nothing.
//! `Tensor::update_slice_from` (a block of a larger source) writes what
//! `update_slice` writes of that block.

use proptest::prelude::*;
use tc_core::Dtype;
use tc_runtime::interp::denote;
use tc_runtime::{Elem, StorageId, Tensor};

/// How the storage is shared while writing.
#[derive(Clone, Copy, Debug)]
enum Held {
    Alone,
    Clone,
    Reshape,
    Id,
}

/// Values every dtype holds exactly and that data movement keeps bit for
/// bit (no NaN: the interpreter quiets narrow-float NaNs as it decodes).
fn tensor(dt: Dtype, shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let e: Vec<Elem> = (0..n as u64)
        .map(|i| {
            let v = (seed.wrapping_mul(31).wrapping_add(i * 7) % 15) as i64 - 7;
            match dt {
                Dtype::Bool => Elem::B(v & 1 == 1),
                d if d.is_int() => Elem::I(if d == Dtype::I4 { v.clamp(-8, 7) } else { v }),
                _ => Elem::F(v as f32 * 0.5),
            }
        })
        .collect();
    Tensor::from_elems(dt, shape, &e).unwrap()
}

/// What the write means, by the interpreter's slice and concat.
fn reference(t: &Tensor, axis: usize, start: usize, src: &Tensor) -> Tensor {
    let (d, len) = (t.shape()[axis] as i64, src.shape()[axis] as i64);
    let head = denote::slice(axis, 0, start as i64, 1, t).unwrap();
    let tail = denote::slice(axis, start as i64 + len, d, 1, t).unwrap();
    denote::concat(axis, &[&head, src, &tail]).unwrap()
}

fn case() -> impl Strategy<Value = (Dtype, Vec<usize>, usize, (usize, usize), Held, u64)> {
    (
        prop::sample::select(Dtype::ALL.to_vec()),
        prop::collection::vec(0usize..5, 1..4),
        any::<prop::sample::Index>(),
        any::<(prop::sample::Index, prop::sample::Index)>(),
        prop::sample::select(vec![Held::Alone, Held::Clone, Held::Reshape, Held::Id]),
        any::<u64>(),
    )
        .prop_map(|(dt, shape, ax, (a, b), held, seed)| {
            let axis = ax.index(shape.len());
            let d = shape[axis];
            let start = a.index(d + 1);
            let len = b.index(d - start + 1);
            (dt, shape, axis, (start, len), held, seed)
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 512 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn update_slice_is_slices_around_the_block((dt, shape, axis, (start, len), held, seed) in case()) {
        let mut t = tensor(dt, &shape, seed);
        let mut ss = shape.clone();
        ss[axis] = len;
        let src = tensor(dt, &ss, seed ^ 0x5a5a);
        let expected = reference(&t, axis, start, &src);
        let before = t.bytes().to_vec();
        let flat: usize = shape.iter().product();
        let other = match held {
            Held::Clone => Some(t.clone()),
            Held::Reshape => Some(t.reshape(&[flat]).unwrap()),
            Held::Alone | Held::Id => None,
        };
        let id = matches!(held, Held::Id).then(|| StorageId::of(&t));
        let uid = t.storage_uid();
        t.update_slice(axis, start, &src).unwrap();
        prop_assert!(t == expected, "{dt} {shape:?} axis {axis} at {start}+{len}");
        let wrote = src.numel() > 0;
        prop_assert_eq!(t.storage_uid() == uid, matches!(held, Held::Alone) || !wrote);
        if let Some(o) = other {
            prop_assert_eq!(o.bytes(), &before[..], "another handle saw the write");
        }
        if let Some(id) = id {
            prop_assert_eq!(id.holds(&t), !wrote);
        }
    }

    /// `update_slice_from` writes what `update_slice` writes of the
    /// source's block `from..from + len`, bit for bit, for every dtype
    /// (I4's nibbles at odd offsets included); a block past the source's
    /// axis, or a reversed one, is refused and changes nothing.
    #[test]
    fn update_slice_from_writes_the_sources_block(
        (dt, shape, axis, (start, len), _held, seed) in case(),
        (extra, pick) in (0usize..4, any::<prop::sample::Index>()),
    ) {
        let mut t = tensor(dt, &shape, seed);
        let mut ss = shape.clone();
        ss[axis] = len + extra;
        let src = tensor(dt, &ss, seed ^ 0x5a5a);
        let from = pick.index(extra + 1);
        let block = denote::slice(axis, from as i64, (from + len) as i64, 1, &src).unwrap();
        let mut expected = t.clone();
        expected.update_slice(axis, start, &block).unwrap();
        t.update_slice_from(axis, start, &src, from..from + len).unwrap();
        prop_assert!(t == expected, "{dt} {shape:?} axis {axis} at {start}+{len} from {from}");
        let (bytes, uid) = (t.bytes().to_vec(), t.storage_uid());
        let past = extra + 1..extra + 1 + len;
        prop_assert!(t.update_slice_from(axis, start, &src, past).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = from + 1..from;
        prop_assert!(t.update_slice_from(axis, start, &src, reversed).is_err());
        prop_assert_eq!(t.bytes(), &bytes[..]);
        prop_assert_eq!(t.storage_uid(), uid);
    }

    /// A write the checks refuse leaves the tensor as it was.
    #[test]
    fn a_refused_write_changes_nothing(
        (dt, shape, axis, (start, len), _held, seed) in case(),
        other_dt in prop::sample::select(Dtype::ALL.to_vec()),
        how in 0usize..4,
    ) {
        let mut t = tensor(dt, &shape, seed);
        let mut ss = shape.clone();
        ss[axis] = len;
        let (mut sdt, mut at, r) = (dt, start, ss.len());
        // 0: another dtype; 1: another rank; 2: another extent off the
        // axis; 3: past the end of the axis.
        let how = if how == 2 && r == 1 { 3 } else { how };
        match how {
            0 => sdt = other_dt,
            1 => ss.push(1),
            2 => ss[(axis + 1) % r] += 1,
            _ => at = shape[axis] - len + 1 + start % 3,
        }
        let src = tensor(sdt, &ss, seed);
        let refused = how != 0 || sdt != dt;
        let (bytes, uid) = (t.bytes().to_vec(), t.storage_uid());
        let got = t.update_slice(axis, at, &src);
        prop_assert_eq!(got.is_err(), refused, "{:?}", got);
        if refused {
            prop_assert_eq!(t.bytes(), &bytes[..]);
            prop_assert_eq!(t.shape(), &shape[..]);
            prop_assert_eq!(t.storage_uid(), uid);
        }
    }
}

/// A cache with room for 300 positions, written one position per step:
/// one storage throughout, every position where it was written, and a
/// position past the room refused.
#[test]
fn a_cache_written_step_by_step_keeps_its_storage() {
    let mut cache = Tensor::zeros(Dtype::F32, &[1, 2, 300, 4]);
    let uid = cache.storage_uid();
    for t in 0..300 {
        let new: Vec<f32> = (0..8).map(|i| (t * 8 + i) as f32).collect();
        cache
            .update_slice(2, t, &Tensor::from_vec(&[1, 2, 1, 4], new).unwrap())
            .unwrap();
    }
    assert_eq!(cache.storage_uid(), uid);
    let v = cache.to_vec::<f32>().unwrap();
    for (h, t, i) in [
        (0usize, 0usize, 0usize),
        (1, 7, 3),
        (0, 299, 2),
        (1, 299, 3),
    ] {
        assert_eq!(v[(h * 300 + t) * 4 + i], (t * 8 + h * 4 + i) as f32);
    }
    let one = Tensor::zeros(Dtype::F32, &[1, 2, 1, 4]);
    let err = cache.update_slice(2, 300, &one).unwrap_err().to_string();
    assert!(
        err.contains("300..300+1") && err.contains("0..300"),
        "{err}"
    );
    assert!(cache.update_slice(2, usize::MAX, &one).is_err());
}

/// Stored bits move unchanged, NaN payloads of every float dtype included
/// (a signalling F16 NaN stays signalling).
#[test]
fn nan_payloads_move_bit_for_bit() {
    for (dt, nan) in [
        (Dtype::F32, 0x7f80_0001u32.to_le_bytes().to_vec()),
        (Dtype::F16, 0x7c01u16.to_le_bytes().to_vec()),
        (Dtype::BF16, 0xff81u16.to_le_bytes().to_vec()),
        (Dtype::F8E4M3, vec![0x7f]),
        (Dtype::F8E5M2, vec![0x7d]),
    ] {
        let mut t = Tensor::zeros(dt, &[3]);
        let src = Tensor::from_raw(dt, &[1], nan.clone()).unwrap();
        t.update_slice(0, 1, &src).unwrap();
        let w = nan.len();
        assert_eq!(&t.bytes()[w..2 * w], &nan[..], "{dt}");
        assert!(t.bytes()[..w]
            .iter()
            .chain(&t.bytes()[2 * w..])
            .all(|&b| b == 0));
    }
}
