//! Hostile-input fuzzing of the GGUF reader: mutated valid files must
//! parse to `Ok` or `Err`, never panic, and on `Ok` every tensor slice must
//! lie inside the input.

use proptest::prelude::*;
use tc_quant::gguf::{Gguf, MetaValue};
use tc_quant::testing::{GgufWriter, Written};

fn valid() -> Written {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", MetaValue::Str("llama"))
        .kv("general.alignment", MetaValue::U32(32))
        .kv("llama.block_count", MetaValue::U32(2))
        .kv(
            "tokenizer.ggml.tokens",
            MetaValue::Array(vec![MetaValue::Str("a"), MetaValue::Str("bb")]),
        )
        .kv(
            "tokenizer.ggml.scores",
            MetaValue::Array(vec![MetaValue::F32(0.5); 3]),
        )
        .kv("flag", MetaValue::Bool(false));
    w.tensor("q8", &[32, 2], 8, &[7; 68])
        .tensor("q41", &[64, 1], 3, &[9; 40])
        .tensor("f32", &[3], 0, &[1; 12]);
    w.finish()
}

/// Parses and, on success, checks every tensor slice is inside `bytes`.
fn parse_is_sound(bytes: &[u8]) {
    if let Ok(g) = Gguf::parse(bytes) {
        let range = bytes.as_ptr_range();
        for t in g.tensors() {
            let d = g.tensor_data(t);
            assert_eq!(d.len(), t.nbytes);
            let r = d.as_ptr_range();
            assert!(d.is_empty() || (range.start <= r.start && r.end <= range.end));
            assert!(g.data_offset() + t.offset as usize + t.nbytes <= bytes.len());
        }
        let _ = (
            g.u32("llama.block_count"),
            g.str_array("tokenizer.ggml.tokens"),
        );
    }
}

#[test]
fn truncation_at_every_length() {
    let file = valid();
    for len in 0..=file.bytes.len() {
        parse_is_sound(&file.bytes[..len]);
    }
    assert!(Gguf::parse(&file.bytes).is_ok());
}

#[test]
fn huge_values_in_every_u64_field() {
    let file = valid();
    assert!(file.u64_fields.len() > 10);
    for &at in &file.u64_fields {
        for v in [
            u64::MAX,
            u64::MAX - 7,
            1 << 63,
            1 << 62,
            1 << 40,
            1 << 32,
            file.bytes.len() as u64,
            0,
        ] {
            let mut b = file.bytes.clone();
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            parse_is_sound(&b);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn random_byte_mutations(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut b = valid().bytes;
        for (i, v) in edits {
            let at = i.index(b.len());
            b[at] = v;
        }
        parse_is_sound(&b);
    }

    #[test]
    fn u64_field_overwrites(field in any::<prop::sample::Index>(), v in any::<u64>(), cut in any::<prop::sample::Index>()) {
        let file = valid();
        let mut b = file.bytes.clone();
        let at = file.u64_fields[field.index(file.u64_fields.len())];
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        parse_is_sound(&b);
        let len = cut.index(b.len() + 1);
        parse_is_sound(&b[..len]);
    }

    #[test]
    fn flips_then_truncation(flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4), cut in any::<prop::sample::Index>()) {
        let mut b = valid().bytes;
        for (i, bit) in flips {
            let at = i.index(b.len());
            b[at] ^= 1 << bit;
        }
        let len = cut.index(b.len() + 1);
        parse_is_sound(&b[..len]);
    }
}
