use super::*;
use crate::testing::GgufWriter;

fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", MetaValue::Str("llama"))
        .kv("llama.block_count", MetaValue::U32(30))
        .kv("llama.context_length", MetaValue::I32(2048))
        .kv("llama.embedding_length", MetaValue::U64(576))
        .kv("llama.rope.freq_base", MetaValue::F32(10000.0))
        .kv("flag", MetaValue::Bool(true))
        .kv(
            "tokenizer.ggml.tokens",
            MetaValue::Array(vec![
                MetaValue::Str("a"),
                MetaValue::Str("bc"),
                MetaValue::Str(""),
            ]),
        )
        .kv(
            "tokenizer.ggml.token_type",
            MetaValue::Array(vec![MetaValue::I32(1), MetaValue::I32(-3)]),
        );
    let q41: Vec<u8> = (0..2 * 20 * 3).map(|i| i as u8).collect();
    let f32s: Vec<u8> = (0..5).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.tensor("blk.0.w", &[64, 3], 3, &q41)
        .tensor("norm", &[5], 0, &f32s)
        .tensor("empty", &[0, 4], 0, &[]);
    w
}

#[test]
fn round_trips_metadata_and_tensors() {
    let file = sample().finish();
    let g = Gguf::parse(&file.bytes).expect("valid");
    assert_eq!(g.version(), 3);
    assert_eq!(g.str("general.architecture").unwrap(), "llama");
    assert_eq!(g.u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.u32("llama.context_length").unwrap(), 2048);
    assert_eq!(g.u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.f32("llama.rope.freq_base").unwrap(), 10000.0);
    assert_eq!(g.get("flag"), Some(&MetaValue::Bool(true)));
    assert_eq!(
        g.str_array("tokenizer.ggml.tokens").unwrap(),
        ["a", "bc", ""]
    );
    assert_eq!(g.i32_array("tokenizer.ggml.token_type").unwrap(), [1, -3]);
    assert_eq!(g.data_offset() % 32, 0);
    assert_eq!(g.tensors().len(), 3);
    let t = g.tensor("blk.0.w").unwrap();
    assert_eq!(t.kind, GgmlType::Q4_1);
    assert_eq!(t.shape_row_major(), [3, 64]);
    assert_eq!(t.nbytes, 120);
    let expect: Vec<u8> = (0..120).map(|i| i as u8).collect();
    assert_eq!(g.tensor_data(t), &expect[..]);
    let norm = g.tensor_bytes("norm").unwrap();
    assert_eq!(&norm[4..8], &1f32.to_le_bytes());
    assert_eq!(g.tensor_bytes("empty").unwrap().len(), 0);
}

#[test]
fn typed_accessor_errors_name_the_key() {
    let file = sample().finish();
    let g = Gguf::parse(&file.bytes).unwrap();
    assert_eq!(
        g.u32("nope"),
        Err(GgufError::MissingKey { key: "nope".into() })
    );
    assert_eq!(
        g.u32("general.architecture"),
        Err(GgufError::WrongType {
            key: "general.architecture".into(),
            expected: "u32",
            found: "string",
        })
    );
    assert!(matches!(
        g.u32("tokenizer.ggml.token_type"),
        Err(GgufError::WrongType { found: "array", .. })
    ));
    assert!(matches!(
        g.str_array("tokenizer.ggml.token_type"),
        Err(GgufError::WrongType { found: "i32", .. })
    ));
    let mut w = GgufWriter::new();
    w.kv("neg", MetaValue::I32(-1));
    let file = w.finish();
    let g = Gguf::parse(&file.bytes).unwrap();
    assert!(matches!(
        g.u32("neg"),
        Err(GgufError::OutOfRange { value: -1, .. })
    ));
}

fn err_of(w: &GgufWriter) -> GgufError {
    Gguf::parse(&w.finish().bytes).expect_err("must be rejected")
}

#[test]
fn rejects_bad_alignment() {
    for a in [0u32, 3, 48] {
        let mut w = GgufWriter::new();
        w.kv("general.alignment", MetaValue::U32(a));
        assert!(matches!(err_of(&w), GgufError::BadAlignment { .. }), "{a}");
    }
    let mut w = GgufWriter::new();
    w.kv("general.alignment", MetaValue::Str("32"));
    assert!(matches!(err_of(&w), GgufError::BadAlignment { .. }));
}

#[test]
fn honours_custom_alignment() {
    let mut w = GgufWriter::new();
    w.alignment(64)
        .tensor("a", &[4], 0, &[1; 16])
        .tensor("b", &[4], 0, &[2; 16]);
    let file = w.finish();
    let g = Gguf::parse(&file.bytes).unwrap();
    assert_eq!(g.data_offset() % 64, 0);
    assert_eq!(g.tensor("b").unwrap().offset, 64);
    assert_eq!(g.tensor_bytes("b").unwrap(), &[2; 16]);
}

#[test]
fn rejects_tensor_defects() {
    let mut w = GgufWriter::new();
    w.tensor("a", &[30, 2], 8, &[0; 68]);
    assert!(matches!(
        err_of(&w),
        GgufError::RaggedRow {
            ne0: 30,
            block: 32,
            ..
        }
    ));
    let mut w = GgufWriter::new();
    w.tensor("a", &[1, 1, 1, 1, 1], 0, &[0; 4]);
    assert!(matches!(
        err_of(&w),
        GgufError::TooManyDims { n_dims: 5, .. }
    ));
    let mut w = GgufWriter::new();
    w.tensor("a", &[1 << 32, 1 << 32], 0, &[]);
    assert!(matches!(err_of(&w), GgufError::DimOverflow { .. }));
    let mut w = GgufWriter::new();
    w.tensor("a", &[4], 0, &[0; 16])
        .tensor("a", &[4], 0, &[0; 16]);
    assert!(matches!(err_of(&w), GgufError::DuplicateTensor { .. }));
    let mut w = GgufWriter::new();
    w.tensor("a", &[8], 0, &[0; 32])
        .tensor_at("b", &[4], 0, &[0; 16], 0);
    assert!(matches!(err_of(&w), GgufError::TensorOverlap { .. }));
    let mut w = GgufWriter::new();
    w.tensor_at("a", &[4], 0, &[0; 16], 4);
    assert!(matches!(
        err_of(&w),
        GgufError::MisalignedTensor { offset: 4, .. }
    ));
    let mut w = GgufWriter::new();
    w.tensor("a", &[4], 77, &[0; 16]);
    assert!(matches!(
        err_of(&w),
        GgufError::UnknownTensorType { ty: 77, .. }
    ));
}

#[test]
fn rejects_tensor_past_end() {
    let mut w = GgufWriter::new();
    w.tensor("a", &[64], 0, &[0; 256]);
    let mut bytes = w.finish().bytes;
    bytes.truncate(bytes.len() - 1);
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(GgufError::TensorOutOfBounds { nbytes: 256, .. })
    ));
}

#[test]
fn rejects_metadata_defects() {
    let mut w = GgufWriter::new();
    w.kv("k", MetaValue::U8(1)).kv("k", MetaValue::U8(2));
    assert!(matches!(err_of(&w), GgufError::DuplicateKey { .. }));
    let mut w = GgufWriter::new();
    w.kv("k", MetaValue::Array(vec![MetaValue::Array(vec![])]));
    assert!(matches!(err_of(&w), GgufError::NestedArray { .. }));
    let mut w = GgufWriter::new();
    w.kv("k", MetaValue::U8(0));
    let mut bytes = w.finish().bytes;
    // Header (24) + key length (8) + "k" (1): the value type.
    bytes[33] = 13;
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(GgufError::UnknownValueType { ty: 13, offset: 33 })
    ));
    bytes[33] = 7;
    bytes[37] = 2;
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(GgufError::InvalidBool { value: 2, .. })
    ));
    let mut w = GgufWriter::new();
    w.kv("k", MetaValue::Str("ab"));
    let mut bytes = w.finish().bytes;
    bytes[45] = 0xff;
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(GgufError::InvalidUtf8 { offset: 45, .. })
    ));
}

#[test]
fn rejects_huge_counts_without_allocating() {
    let mut w = GgufWriter::new();
    w.kv("k", MetaValue::Array(vec![MetaValue::U8(1)]))
        .kv("s", MetaValue::Str("x"));
    let file = w.finish();
    for &at in &file.u64_fields {
        for huge in [u64::MAX, u64::MAX / 2, 1 << 40, file.bytes.len() as u64] {
            let mut bytes = file.bytes.clone();
            bytes[at..at + 8].copy_from_slice(&huge.to_le_bytes());
            assert!(Gguf::parse(&bytes).is_err(), "field at {at} = {huge}");
        }
    }
}

#[test]
fn rejects_header_defects() {
    assert!(matches!(
        Gguf::parse(b"GGU"),
        Err(GgufError::Truncated { .. })
    ));
    assert!(matches!(
        Gguf::parse(b"GGML\x03\0\0\0"),
        Err(GgufError::BadMagic { .. })
    ));
    let mut bytes = GgufWriter::new().finish().bytes;
    assert!(Gguf::parse(&bytes).is_ok());
    bytes[4] = 1;
    assert_eq!(
        Gguf::parse(&bytes).unwrap_err(),
        GgufError::UnsupportedVersion(1)
    );
}

#[test]
fn truncation_at_every_length_is_an_error() {
    let file = sample().finish();
    let g = Gguf::parse(&file.bytes).unwrap();
    let end = g
        .tensors()
        .iter()
        .map(|t| g.data_offset() + t.offset as usize + t.nbytes);
    let end = end.max().unwrap();
    for len in 0..end {
        assert!(Gguf::parse(&file.bytes[..len]).is_err(), "len {len}");
    }
    // Trailing padding after the last tensor is optional.
    assert!(Gguf::parse(&file.bytes[..end]).is_ok());
}
