//! Tensor storage (Section 2 §5 layout), constructors, accessors, Display,
//! ndarray interop and safetensors I/O.

use std::collections::BTreeMap;

use half::{bf16, f16};
use ndarray::{arr2, ArrayD, IxDyn};
use tc_core::concrete::RuleError;
use tc_core::Dtype;
use tc_runtime::safetensors_io::{
    load_safetensors_bytes, load_tensor_from_bytes, save_safetensors_bytes,
};
use tc_runtime::{
    load_safetensors, load_safetensors_mapped, load_tensor, save_safetensors, Elem, Error, Tensor,
    F8E4M3, F8E5M2, I4,
};

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "tc-runtime-test-{}-{name}.safetensors",
        std::process::id()
    ))
}

#[test]
fn tensor_is_send_sync_and_clone_shares_storage() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
    let t = Tensor::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let u = t.clone();
    assert_eq!(t.bytes().as_ptr(), u.bytes().as_ptr());
    let r = t.reshape(&[1, 3]).unwrap();
    assert_eq!(r.bytes().as_ptr(), t.bytes().as_ptr());
    assert_eq!(r.shape(), &[1, 3]);
    let h = std::thread::spawn(move || u.to_vec::<f32>().unwrap());
    assert_eq!(h.join().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn from_elems_encodes_in_the_spec_layout() {
    let t = Tensor::from_elems(Dtype::F32, &[2], &[Elem::F(1.0), Elem::F(-2.5)]).unwrap();
    assert_eq!(t.bytes(), &[0, 0, 0x80, 0x3F, 0, 0, 0x20, 0xC0]);
    let t = Tensor::from_elems(Dtype::F16, &[2], &[Elem::F(1.0), Elem::F(65520.0)]).unwrap();
    assert_eq!(t.bytes(), &[0x00, 0x3C, 0x00, 0x7C]); // 1.0, +inf
    let t = Tensor::from_elems(Dtype::BF16, &[1], &[Elem::F(1.0)]).unwrap();
    assert_eq!(t.bytes(), &[0x80, 0x3F]);
    let t = Tensor::from_elems(
        Dtype::F8E4M3,
        &[3],
        &[Elem::F(1.0), Elem::F(1e9), Elem::I(-1)],
    )
    .unwrap();
    assert_eq!(t.bytes(), &[0x38, 0x7E, 0xB8]);
    let t = Tensor::from_elems(Dtype::F8E5M2, &[2], &[Elem::F(1.0), Elem::B(true)]).unwrap();
    assert_eq!(t.bytes(), &[0x3C, 0x3C]);
    let t = Tensor::from_elems(Dtype::I16, &[2], &[Elem::I(-2), Elem::I(70000)]).unwrap();
    assert_eq!(t.bytes(), &[0xFE, 0xFF, 0x70, 0x11]); // 70000 wraps to 4464
    let t = Tensor::from_elems(Dtype::I64, &[1], &[Elem::I(-1)]).unwrap();
    assert_eq!(t.bytes(), &[0xFF; 8]);
    let t = Tensor::from_elems(Dtype::I32, &[2], &[Elem::F(3.7), Elem::F(f32::NAN)]).unwrap();
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![3, 0]);
    let t = Tensor::from_elems(Dtype::I8, &[2], &[Elem::I(300), Elem::F(-1e9)]).unwrap();
    assert_eq!(t.bytes(), &[44, 0x80]);
    let t = Tensor::from_elems(
        Dtype::Bool,
        &[4],
        &[Elem::B(true), Elem::F(-0.0), Elem::F(f32::NAN), Elem::I(0)],
    )
    .unwrap();
    assert_eq!(t.bytes(), &[1, 0, 1, 0]);
    // Rounding happens on the way in: the stored value is the F16 value.
    let t = Tensor::from_elems(Dtype::F16, &[1], &[Elem::F(1.0 + 2f32.powi(-11))]).unwrap();
    assert_eq!(t.get(0), Some(Elem::F(1.0)));
}

#[test]
fn i4_packs_low_nibble_first() {
    let t = Tensor::from_elems(Dtype::I4, &[3], &[Elem::I(1), Elem::I(-2), Elem::I(3)]).unwrap();
    assert_eq!(t.bytes(), &[0xE1, 0x03]);
    assert_eq!(t.to_elems(), vec![Elem::I(1), Elem::I(-2), Elem::I(3)]);
    // Wrap on the way in: 9 → -7, -9 → 7.
    let t = Tensor::from_elems(Dtype::I4, &[2], &[Elem::I(9), Elem::I(-9)]).unwrap();
    assert_eq!(t.bytes(), &[0x79]);
    assert_eq!(
        t.to_vec::<I4>().unwrap(),
        vec![I4::new(-7).unwrap(), I4::new(7).unwrap()]
    );
    let t = Tensor::from_vec(
        &[2, 2],
        vec![
            I4::wrapping(-8),
            I4::wrapping(7),
            I4::wrapping(0),
            I4::wrapping(-1),
        ],
    )
    .unwrap();
    assert_eq!(t.bytes(), &[0x78, 0xF0]);
}

#[test]
fn i4_every_byte_round_trips() {
    // 256 bytes = 512 nibbles: every (low, high) pair.
    let bytes: Vec<u8> = (0..=255u8).collect();
    let t = Tensor::from_raw(Dtype::I4, &[512], bytes.clone()).unwrap();
    let elems = t.to_elems();
    for (i, e) in elems.iter().enumerate() {
        let nib = (bytes[i / 2] >> (4 * (i % 2))) & 0xF;
        let want = if nib >= 8 {
            nib as i64 - 16
        } else {
            nib as i64
        };
        assert_eq!(*e, Elem::I(want), "element {i}");
    }
    let back = Tensor::from_elems(Dtype::I4, &[512], &elems).unwrap();
    assert_eq!(back.bytes(), &bytes[..]);
    // Odd length: the spare high nibble is cleared.
    let t = Tensor::from_raw(Dtype::I4, &[3], vec![0x21, 0xF3]).unwrap();
    assert_eq!(t.bytes(), &[0x21, 0x03]);
    assert_eq!(t.to_elems(), vec![Elem::I(1), Elem::I(2), Elem::I(3)]);
}

#[test]
fn typed_round_trips_for_every_element_type() {
    fn rt<T: tc_runtime::Element + PartialEq>(data: Vec<T>, dtype: Dtype, nbytes: usize) {
        let t = Tensor::from_vec(&[data.len()], data.clone()).unwrap();
        assert_eq!(t.dtype(), dtype);
        assert_eq!(t.bytes().len(), nbytes);
        assert_eq!(t.to_vec::<T>().unwrap(), data);
        let again = Tensor::from_elems(dtype, t.shape(), &t.to_elems()).unwrap();
        assert_eq!(
            again, t,
            "{dtype}: from_elems(to_elems) must reproduce the bytes"
        );
    }
    rt(vec![1.5f32, -0.0, f32::INFINITY, 1e-45], Dtype::F32, 16);
    rt(
        vec![f16::from_f32(0.5), f16::MAX, f16::NEG_INFINITY],
        Dtype::F16,
        6,
    );
    rt(
        vec![bf16::from_f32(0.5), bf16::MIN_POSITIVE],
        Dtype::BF16,
        4,
    );
    rt(
        (0..=255u8)
            .filter(|b| b & 0x7F != 0x7F)
            .map(F8E4M3)
            .collect(),
        Dtype::F8E4M3,
        254,
    );
    rt(
        (0..=255u8)
            .filter(|b| b & 0x7F < 0x7C)
            .map(F8E5M2)
            .collect(),
        Dtype::F8E5M2,
        248,
    );
    rt(vec![i64::MIN, -1, i64::MAX], Dtype::I64, 24);
    rt(vec![i32::MIN, 7], Dtype::I32, 8);
    rt(vec![i16::MIN, 7, i16::MAX], Dtype::I16, 6);
    rt(vec![i8::MIN, 0, i8::MAX], Dtype::I8, 3);
    rt(
        (-8..=7).map(|v| I4::new(v).unwrap()).collect(),
        Dtype::I4,
        8,
    );
    rt(vec![true, false, true], Dtype::Bool, 3);
    // Stored F8E5M2 infinities load as ±inf; casting them back saturates.
    let t = Tensor::from_raw(Dtype::F8E5M2, &[2], vec![0x7C, 0xFC]).unwrap();
    assert_eq!(
        t.to_elems(),
        vec![Elem::F(f32::INFINITY), Elem::F(f32::NEG_INFINITY)]
    );
    let again = Tensor::from_elems(Dtype::F8E5M2, &[2], &t.to_elems()).unwrap();
    assert_eq!(again.bytes(), &[0x7B, 0xFB]);
    // from_vec keeps NaN payloads bit for bit.
    let nan = f32::from_bits(0x7F80_0001);
    let t = Tensor::from_vec(&[1], vec![nan]).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap()[0].to_bits(), 0x7F80_0001);
}

#[test]
fn zeros_full_and_scalars() {
    for dt in Dtype::ALL {
        let z = Tensor::zeros(dt, &[3, 5]);
        assert_eq!(z.numel(), 15);
        assert_eq!(z.bytes().len(), dt.storage_bytes(15));
        assert!(z.bytes().iter().all(|&b| b == 0));
        assert!(
            z.to_elems().iter().all(|e| e.bit_eq(Elem::zero(dt))),
            "{dt}"
        );
        let f = Tensor::full(dt, &[2, 3], Elem::I(3)).unwrap();
        assert!(f
            .to_elems()
            .iter()
            .all(|&e| e == tc_runtime::convert(Elem::I(3), dt)));
        let s = Tensor::scalar(dt, Elem::F(-1.0));
        assert_eq!(s.shape(), &[] as &[usize]);
        assert_eq!(s.numel(), 1);
        assert_eq!(s.bytes().len(), dt.storage_bytes(1));
        assert_eq!(s.get(0), Some(tc_runtime::convert(Elem::F(-1.0), dt)));
    }
    assert_eq!(Tensor::zeros(Dtype::F32, &[4, 0]).numel(), 0);
    assert_eq!(Tensor::from_scalar(7i16).to_vec::<i16>().unwrap(), vec![7]);
    assert!(matches!(
        Tensor::try_zeros(Dtype::F32, &[usize::MAX, 2]),
        Err(Error::Rule(RuleError::Size(_)))
    ));
}

#[test]
fn accessors() {
    let t = Tensor::from_vec(&[2, 3], vec![0i32, 1, 2, 10, 11, 12]).unwrap();
    assert_eq!(t.rank(), 2);
    assert_eq!(t.get(4), Some(Elem::I(11)));
    assert_eq!(t.get(6), None);
    assert_eq!(t.elem(5), Elem::I(12));
    assert_eq!(t.elem(600), Elem::I(0)); // documented: out of range → zero, no panic
    assert_eq!(t.get_at(&[1, 2]), Some(Elem::I(12)));
    assert_eq!(t.get_at(&[2, 0]), None);
    assert_eq!(t.get_at(&[0]), None);
    let c = t.cast(Dtype::I4).unwrap();
    assert_eq!(
        c.to_elems(),
        vec![0, 1, 2, -6, -5, -4]
            .into_iter()
            .map(Elem::I)
            .collect::<Vec<_>>()
    );
    let f = Tensor::from_vec(&[3], vec![1e6f32, -3.9, f32::NAN])
        .unwrap()
        .cast(Dtype::I4)
        .unwrap();
    assert_eq!(f.to_elems(), vec![Elem::I(7), Elem::I(-3), Elem::I(0)]);
}

#[test]
fn bad_inputs_are_errors() {
    assert!(matches!(
        Tensor::from_elems(Dtype::F32, &[2, 2], &[Elem::F(1.0); 3]),
        Err(Error::DataLength {
            expected: 4,
            found: 3,
            ..
        })
    ));
    assert!(matches!(
        Tensor::from_vec(&[5], vec![1i8; 4]),
        Err(Error::DataLength {
            expected: 5,
            found: 4,
            ..
        })
    ));
    assert!(matches!(
        Tensor::from_raw(Dtype::F16, &[3], vec![0; 5]),
        Err(Error::ByteLength {
            expected: 6,
            found: 5,
            ..
        })
    ));
    assert!(matches!(
        Tensor::from_raw(Dtype::I4, &[3], vec![0; 1]),
        Err(Error::ByteLength {
            expected: 2,
            found: 1,
            ..
        })
    ));
    assert_eq!(
        Tensor::from_raw(Dtype::Bool, &[3], vec![0, 1, 2]),
        Err(Error::InvalidBool { index: 2, byte: 2 })
    );
    assert!(matches!(
        Tensor::from_raw(Dtype::I8, &[usize::MAX, 3], vec![]),
        Err(Error::Rule(RuleError::Size(_)))
    ));
    let t = Tensor::from_vec(&[2, 3], vec![1.0f32; 6]).unwrap();
    assert_eq!(
        t.to_vec::<f16>(),
        Err(Error::WrongElementType {
            expected: Dtype::F16,
            found: Dtype::F32
        })
    );
    assert!(matches!(
        t.reshape(&[4, 2]),
        Err(Error::Rule(RuleError::ReshapeVolume {
            from_volume: 6,
            to_volume: 8,
            ..
        }))
    ));
    assert!(t.reshape(&[6]).is_ok());
    assert!(t.reshape(&[3, 1, 2]).is_ok());
}

#[test]
fn display_previews_values() {
    let t = Tensor::from_vec(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    assert_eq!(
        t.to_string(),
        "Tensor[f32; 2, 3] [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]"
    );
    assert_eq!(format!("{t:?}"), t.to_string());
    let big = Tensor::from_vec(&[5, 4], (0..20i64).collect()).unwrap();
    assert_eq!(
        big.to_string(),
        "Tensor[i64; 5, 4] [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15], ...]"
    );
    let long = Tensor::from_vec(&[17], vec![true; 17]).unwrap();
    assert!(long.to_string().ends_with("true, ...]"), "{long}");
    assert_eq!(Tensor::from_scalar(2.5f32).to_string(), "Tensor[f32] 2.5");
    assert_eq!(
        Tensor::zeros(Dtype::I4, &[0]).to_string(),
        "Tensor[i4; 0] []"
    );
    // Empty through its first axis, with later axes whose volume is past
    // usize: the preview's row stride is never used, and must not overflow.
    let wide = Tensor::try_zeros(Dtype::F32, &[0, 1 << 40, 1 << 40]).unwrap();
    assert_eq!(
        wide.to_string(),
        "Tensor[f32; 0, 1099511627776, 1099511627776] []"
    );
    let later = Tensor::try_zeros(Dtype::F32, &[2, 1 << 40, 1 << 40, 0]).unwrap();
    assert_eq!(
        later.to_string(),
        format!(
            "Tensor[f32; 2, 1099511627776, 1099511627776, 0] [[[{}, ...], ...], ...]",
            ["[]"; 16].join(", ")
        )
    );
    let rows = Tensor::try_zeros(Dtype::F32, &[2, 0]).unwrap();
    assert_eq!(rows.to_string(), "Tensor[f32; 2, 0] [[], []]");
    let nan = Tensor::from_elems(
        Dtype::BF16,
        &[2],
        &[Elem::F(f32::NAN), Elem::F(f32::NEG_INFINITY)],
    )
    .unwrap();
    assert_eq!(nan.to_string(), "Tensor[bf16; 2] [NaN, -inf]");
}

#[test]
fn ndarray_round_trip_and_views() {
    let a = arr2(&[[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]]);
    let t = Tensor::try_from(a.clone()).unwrap();
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.dtype(), Dtype::F32);
    let back: ArrayD<f32> = t.to_ndarray().unwrap();
    assert_eq!(back, a.clone().into_dyn());
    // Non-standard layout: taken in logical (row-major) order.
    let tt = Tensor::try_from(&a.t()).unwrap();
    assert_eq!(tt.shape(), &[3, 2]);
    assert_eq!(
        tt.to_vec::<f32>().unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    // Zero-copy view.
    let v = t.as_array_view::<f32>().unwrap();
    assert_eq!(v.as_ptr() as *const u8, t.bytes().as_ptr());
    assert_eq!(v[[1, 2]], 6.0);
    assert_eq!(v.shape(), &[2, 3]);
    let b = Tensor::from_vec(&[2, 2], vec![true, false, false, true]).unwrap();
    assert!(b.as_array_view::<bool>().unwrap()[[1, 1]]);
    let h = Tensor::from_elems(Dtype::F16, &[2], &[Elem::F(0.5), Elem::F(2.0)]).unwrap();
    assert_eq!(
        h.as_slice::<f16>().unwrap(),
        &[f16::from_f32(0.5), f16::from_f32(2.0)]
    );
    let e = Tensor::from_elems(Dtype::F8E5M2, &[1], &[Elem::F(2.0)]).unwrap();
    assert_eq!(e.as_array_view::<F8E5M2>().unwrap()[[0]].to_f32(), 2.0);
    // Packed I4 has no in-place view; a dtype mismatch is typed.
    let i4 = Tensor::zeros(Dtype::I4, &[4]);
    assert_eq!(
        i4.as_array_view::<I4>().err(),
        Some(Error::NoZeroCopyView { dtype: Dtype::I4 })
    );
    assert!(i4.to_ndarray::<I4>().is_ok());
    assert!(matches!(
        t.as_array_view::<i32>(),
        Err(Error::WrongElementType { .. })
    ));
    assert!(matches!(
        t.to_ndarray::<f16>(),
        Err(Error::WrongElementType { .. })
    ));
    // Rank 0 and empty.
    let s = Tensor::try_from(ArrayD::from_elem(IxDyn(&[]), 9i64)).unwrap();
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.to_vec::<i64>().unwrap(), vec![9]);
    let z = Tensor::zeros(Dtype::F32, &[0, 3]);
    assert_eq!(z.as_array_view::<f32>().unwrap().shape(), &[0, 3]);
}

fn sample_tensors() -> BTreeMap<String, Tensor> {
    let mut m = BTreeMap::new();
    for (k, dt) in Dtype::ALL.iter().enumerate() {
        if *dt == Dtype::I4 {
            continue;
        }
        let elems: Vec<Elem> = (0..6).map(|i| Elem::I(i as i64 - 2 + k as i64)).collect();
        let mut t = Tensor::from_elems(*dt, &[2, 3], &elems).unwrap();
        if k % 2 == 0 {
            t = t.reshape(&[3, 2]).unwrap();
        }
        m.insert(format!("t_{}", dt.name()), t);
    }
    m
}

#[test]
fn safetensors_round_trip_bytes_and_file() {
    let m = sample_tensors();
    assert_eq!(m.len(), 10);
    let bytes = save_safetensors_bytes(&m).unwrap();
    assert_eq!(load_safetensors_bytes(&bytes).unwrap(), m);
    let path = temp_path("roundtrip");
    save_safetensors(&path, &m).unwrap();
    assert_eq!(load_safetensors(&path).unwrap(), m);
    let t = load_tensor(&path, "t_bf16", Dtype::BF16, Some(&[3, 2])).unwrap();
    assert_eq!(&t, &m["t_bf16"]);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn safetensors_written_by_the_reference_serializer() {
    use safetensors::tensor::{Dtype as St, TensorView};
    let f32s: Vec<u8> = [1.0f32, -2.0, 0.5, 8.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let bf: Vec<u8> = [bf16::from_f32(3.0), bf16::from_f32(-0.25)]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let e4 = vec![0x38u8, 0xB8, 0x7E];
    let bools = vec![1u8, 0];
    let u8s = vec![1u8, 2];
    let views = vec![
        ("w", TensorView::new(St::F32, vec![2, 2], &f32s).unwrap()),
        ("b", TensorView::new(St::BF16, vec![2], &bf).unwrap()),
        ("e", TensorView::new(St::F8_E4M3, vec![3], &e4).unwrap()),
        ("m", TensorView::new(St::BOOL, vec![1, 2], &bools).unwrap()),
        ("u", TensorView::new(St::U8, vec![2], &u8s).unwrap()),
    ];
    let bytes = safetensors::serialize(views, &None).unwrap();
    let w = load_tensor_from_bytes(&bytes, "w", Dtype::F32, Some(&[2, 2])).unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0, -2.0, 0.5, 8.0]);
    let b = load_tensor_from_bytes(&bytes, "b", Dtype::BF16, None).unwrap();
    assert_eq!(b.to_elems(), vec![Elem::F(3.0), Elem::F(-0.25)]);
    let e = load_tensor_from_bytes(&bytes, "e", Dtype::F8E4M3, Some(&[3])).unwrap();
    assert_eq!(
        e.to_elems(),
        vec![Elem::F(1.0), Elem::F(-1.0), Elem::F(448.0)]
    );
    let m = load_tensor_from_bytes(&bytes, "m", Dtype::Bool, Some(&[1, 2])).unwrap();
    assert_eq!(m.to_vec::<bool>().unwrap(), vec![true, false]);

    // What the caller asks for is checked.
    assert_eq!(
        load_tensor_from_bytes(&bytes, "w", Dtype::F16, None).err(),
        Some(Error::Dtype {
            param: "w".into(),
            expected: Dtype::F16,
            found: Dtype::F32
        })
    );
    assert_eq!(
        load_tensor_from_bytes(&bytes, "w", Dtype::F32, Some(&[4])).err(),
        Some(Error::ShapeMismatch {
            context: "safetensors tensor `w`".into(),
            expected: vec![4],
            found: vec![2, 2],
        })
    );
    assert!(matches!(
        load_tensor_from_bytes(&bytes, "nope", Dtype::F32, None),
        Err(Error::Safetensors(msg)) if msg.contains("nope")
    ));
    assert!(matches!(
        load_tensor_from_bytes(&bytes, "u", Dtype::I8, None),
        Err(Error::Safetensors(_))
    ));
    // A whole-file load fails on the unsupported U8 entry.
    assert!(
        matches!(load_safetensors_bytes(&bytes), Err(Error::Safetensors(msg)) if msg.contains("`u`"))
    );

    // Same through a file written by safetensors::serialize_to_file.
    let path = temp_path("reference");
    let views = vec![("w", TensorView::new(St::F32, vec![2, 2], &f32s).unwrap())];
    safetensors::serialize_to_file(views, &None, &path).unwrap();
    let all = load_safetensors(&path).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all["w"].to_vec::<f32>().unwrap(), vec![1.0, -2.0, 0.5, 8.0]);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn safetensors_bad_inputs_are_errors() {
    use safetensors::tensor::{Dtype as St, TensorView};
    assert!(matches!(
        load_safetensors_bytes(b"not a file"),
        Err(Error::Safetensors(_))
    ));
    assert!(matches!(
        load_safetensors_bytes(&[]),
        Err(Error::Safetensors(_))
    ));
    let missing = temp_path("does-not-exist");
    assert!(matches!(
        load_safetensors(&missing),
        Err(Error::Safetensors(_))
    ));
    assert!(matches!(
        load_tensor(&missing, "w", Dtype::F32, None),
        Err(Error::Safetensors(_))
    ));
    // Truncated file.
    let bytes = save_safetensors_bytes(&sample_tensors()).unwrap();
    assert!(matches!(
        load_safetensors_bytes(&bytes[..bytes.len() - 3]),
        Err(Error::Safetensors(_))
    ));
    // A BOOL entry holding a 2.
    let raw = vec![1u8, 2];
    let bytes = safetensors::serialize(
        vec![("m", TensorView::new(St::BOOL, vec![2], &raw).unwrap())],
        &None,
    )
    .unwrap();
    assert_eq!(
        load_tensor_from_bytes(&bytes, "m", Dtype::Bool, None).err(),
        Some(Error::InvalidBool { index: 1, byte: 2 })
    );
    // I4 has no safetensors dtype.
    let mut m = BTreeMap::new();
    m.insert("q".to_string(), Tensor::zeros(Dtype::I4, &[4]));
    assert!(
        matches!(save_safetensors_bytes(&m), Err(Error::Safetensors(msg)) if msg.contains("i4"))
    );
}

/// The file loader reads the header and then each tensor straight into its
/// storage instead of the whole file at once: on every file, valid or not,
/// it must give what the buffer loader gives on the file's bytes (errors
/// prefixed with the path). The files: a valid one with every dtype and a
/// BOOL entry, cut at every length, and with every byte replaced by each of
/// a few values (header length, JSON, offsets, dtypes, bool data).
#[test]
fn the_file_loader_agrees_with_the_buffer_loader_on_every_corruption() {
    use safetensors::tensor::{Dtype as St, TensorView};
    let raw = [1u8, 0, 1];
    let f = [1.5f32, -2.0];
    let fb: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
    let u8s = [7u8];
    let file = |with_u8: bool| {
        let mut views = vec![
            ("m", TensorView::new(St::BOOL, vec![3], &raw).unwrap()),
            ("w", TensorView::new(St::F32, vec![2], &fb).unwrap()),
            ("e", TensorView::new(St::F32, vec![0], &[]).unwrap()),
        ];
        if with_u8 {
            // A dtype tc does not load: an error between valid tensors.
            views.push(("u", TensorView::new(St::U8, vec![1], &u8s).unwrap()));
        }
        safetensors::serialize(views, &None).unwrap()
    };
    let path = temp_path("agreement");
    let ctx = path.display().to_string();
    let check = |bytes: &[u8], what: &str| {
        std::fs::write(&path, bytes).unwrap();
        let want = load_safetensors_bytes(bytes).map_err(|e| match e {
            Error::Safetensors(m) => Error::Safetensors(format!("{ctx}: {m}")),
            other => other,
        });
        assert_eq!(load_safetensors(&path), want, "{what}");
        // Miri cannot map files.
        #[cfg(not(miri))]
        // SAFETY: the file is rewritten only after these tensors are dropped
        // (at the end of this statement).
        assert_eq!(
            unsafe { load_safetensors_mapped(&path) },
            want,
            "{what}, mapped"
        );
    };
    let mut cases = 0;
    let good = file(false);
    assert_eq!(load_safetensors_bytes(&good).map(|m| m.len()), Ok(3));
    for valid in [good, file(true)] {
        for cut in 0..=valid.len() {
            check(&valid[..cut], &format!("cut at {cut}"));
            cases += 1;
        }
        for i in 0..valid.len() {
            for v in [0u8, 2, 0x7f, 0xff, b'9'] {
                let mut b = valid.clone();
                b[i] = v;
                check(&b, &format!("byte {i} = {v}"));
                cases += 1;
            }
        }
        // Header lengths past the end, over the crate's limit, and huge.
        for n in [u64::MAX, 1 << 40, 100_000_001, valid.len() as u64] {
            let mut b = valid.clone();
            b[..8].copy_from_slice(&n.to_le_bytes());
            check(&b, &format!("header length {n}"));
        }
    }
    let _ = std::fs::remove_file(&path);
    assert!(cases > 2000);
}

/// A mapped file (`load_safetensors_mapped`): the same tensors as the
/// copying loader (every dtype); an aligned f32 tensor of whole words is
/// read where the file lies, so a write into it, even alone, goes to a
/// copy, while a tensor of 12 bytes was copied at load and is written in
/// place; the file never changes, and it is in the process's mappings
/// exactly while a tensor on it lives.
#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn a_mapped_file_gives_the_same_tensors_and_is_never_written() {
    let mut m = sample_tensors();
    // f32 entries come first in the file (by alignment, then name), from
    // offset 0 of the 8-byte-aligned data: `a` and `b` are whole words.
    let big: Vec<f32> = (0..4096).map(|i| i as f32 * 0.25 - 7.0).collect();
    m.insert("a".into(), Tensor::from_vec(&[64, 64], big).unwrap());
    m.insert(
        "b".into(),
        Tensor::from_vec(&[2, 4], vec![1.5f32; 8]).unwrap(),
    );
    m.insert(
        "c".into(),
        Tensor::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap(),
    );
    let path = temp_path("mapped");
    save_safetensors(&path, &m).unwrap();
    let on_disk = std::fs::read(&path).unwrap();
    let mapped_now = || {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.contains(path.to_str().unwrap())
    };
    // SAFETY: the file is only read until it is removed below, after every
    // tensor on it is dropped.
    let mut got = unsafe { load_safetensors_mapped(&path) }.unwrap();
    assert_eq!(got, m);
    assert!(mapped_now(), "the file is mapped");
    let row = Tensor::from_vec(&[1, 4], vec![9.5f32; 4]).unwrap();
    let mut b = got.remove("b").unwrap();
    let uid = b.storage_uid();
    b.update_slice(0, 1, &row).unwrap();
    assert_ne!(
        b.storage_uid(),
        uid,
        "a mapped tensor, even alone, is copied"
    );
    assert_eq!(
        b.to_vec::<f32>().unwrap(),
        [1.5, 1.5, 1.5, 1.5, 9.5, 9.5, 9.5, 9.5]
    );
    let mut c = got.remove("c").unwrap();
    let uid = c.storage_uid();
    c.update_slice(0, 0, &Tensor::from_vec(&[1], vec![4.0f32]).unwrap())
        .unwrap();
    assert_eq!(
        c.storage_uid(),
        uid,
        "12 bytes: copied at load, written in place"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        on_disk,
        "the file is unchanged"
    );
    let a = got.remove("a").unwrap();
    drop(got);
    assert!(mapped_now(), "kept by `a`");
    assert_eq!(a, m["a"]);
    drop(a);
    assert!(!mapped_now(), "unmapped with the last tensor on it");
    let _ = std::fs::remove_file(&path);
}

/// A file that cannot be mapped is read instead: sysfs has no `mmap`
/// (ENODEV) yet reports a size, so the mapped loader must give the buffer
/// loader's own answer for it (here the same header error), not an error
/// of its own. Skipped where the file does not exist.
#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn a_file_that_cannot_be_mapped_is_read_instead() {
    let path = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
    if !path.exists() {
        eprintln!("skipped: no {}", path.display());
        return;
    }
    let file = std::fs::File::open(path).unwrap();
    assert!(file.metadata().unwrap().len() > 0, "sysfs reports a size");
    let read = load_safetensors(path).unwrap_err().to_string();
    // SAFETY: sysfs files are never mapped (the point of the test); the
    // loader reads this one.
    let mapped = unsafe { load_safetensors_mapped(path) }
        .unwrap_err()
        .to_string();
    assert_eq!(mapped, read);
    assert!(!mapped.contains("No such device"), "{mapped}");
}

/// Releasing a mapped tensor's resident pages changes no byte it reads
/// (they come back from the file), and is a no-op on heap storage.
#[test]
fn releasing_resident_pages_keeps_the_bytes() {
    // Several pages, so whole pages lie inside the tensor.
    let n = 5 * 4096;
    let data: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    let t = Tensor::from_vec(&[n], data.clone()).unwrap();
    let path = temp_path("release-pages");
    let map = std::collections::BTreeMap::from([("w".to_string(), t.clone())]);
    save_safetensors(&path, &map).unwrap();
    {
        // SAFETY: the file is removed only after the mapped tensors are
        // dropped (at the end of this block), and nothing writes it.
        let m = unsafe { load_safetensors_mapped(&path) }.unwrap();
        let w = &m["w"];
        assert_eq!(w.to_vec::<f32>().unwrap(), data);
        w.release_resident_pages();
        assert_eq!(w.to_vec::<f32>().unwrap(), data);
        w.release_resident_pages();
        assert_eq!(w.bytes(), t.bytes());
    }
    t.release_resident_pages();
    assert_eq!(t.to_vec::<f32>().unwrap(), data);
    std::fs::remove_file(&path).unwrap();
}
