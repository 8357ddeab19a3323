//! `dequantize` against (a) gguf-py's output when the fixture exists and
//! (b) an independent transcription of ggml's C `dequantize_row_*`.
//!
//! Fixture: `tests/fixtures/quant/dequant_reference.json` at the repo root
//! (from `scripts/quant-reference.py`), or the path in
//! `TC_QUANT_DEQUANT_FIXTURE`: `{"formats": {"q4_1": {"hex": "…",
//! "f32_bits": [u32, …]}, …}, "real_q4_1": {…}, "real_q8_0": {…}}`.

use crate::common;

use common::{random_blocks, Rng};
use half::f16;
use tc_quant::{dequantize, Format, QuantError};

/// The string value following `"key": "` at or after `from`.
fn string_after<'a>(s: &'a str, key: &str, from: usize) -> Option<(&'a str, usize)> {
    let at = from + s[from..].find(&format!("\"{key}\""))?;
    let open = at + s[at..].find(':')? + 1;
    let open = open + s[open..].find('"')? + 1;
    let close = open + s[open..].find('"')?;
    Some((&s[open..close], close))
}

/// The integer list following `"key": [` at or after `from`.
fn list_after(s: &str, key: &str, from: usize) -> Option<(Vec<u32>, usize)> {
    let at = from + s[from..].find(&format!("\"{key}\""))?;
    let open = at + s[at..].find('[')? + 1;
    let close = open + s[open..].find(']')?;
    let items = s[open..close].split(',').filter(|t| !t.trim().is_empty());
    Some((
        items.map(|t| t.trim().parse().expect("u32")).collect(),
        close,
    ))
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn matches_gguf_py_fixture() {
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/quant/dequant_reference.json"
    );
    let path = std::env::var("TC_QUANT_DEQUANT_FIXTURE").unwrap_or_else(|_| root.to_owned());
    let Ok(json) = std::fs::read_to_string(&path) else {
        println!("skipped: {path} not generated (scripts/quant-reference.py)");
        return;
    };
    let formats = json.find("\"formats\"").expect("formats");
    let mut cases: Vec<(Format, usize)> = Vec::new();
    for f in Format::ALL {
        let key = format!("\"{}\"", f.name());
        cases.extend(json[formats..].find(&key).map(|at| (f, formats + at)));
    }
    for (key, f) in [("real_q4_1", Format::Q4_1), ("real_q8_0", Format::Q8_0)] {
        cases.extend(json.find(&format!("\"{key}\"")).map(|at| (f, at)));
    }
    assert!(!cases.is_empty(), "no cases in {path}");
    for &(f, at) in &cases {
        let (blocks, p) = string_after(&json, "hex", at).expect("hex");
        let (bits, _) = list_after(&json, "f32_bits", p).expect("f32_bits");
        let mut out = vec![0f32; bits.len()];
        dequantize(f, &hex(blocks), &mut out).unwrap();
        let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, bits, "{f:?} at byte {at}");
    }
    println!("{} fixture cases bit-exact", cases.len());
}

fn h(b: &[u8], i: usize) -> f32 {
    f16::from_bits(b[i] as u16 | (b[i + 1] as u16) << 8).to_f32()
}

/// ggml-quants.c, written as its C loops (pointer offsets as indices).
fn ggml_row(f: Format, x: &[u8], y: &mut [f32]) {
    let bb = f.block_bytes();
    for (i, b) in x.chunks_exact(bb).enumerate() {
        match f {
            Format::Q8_0 => {
                for j in 0..32 {
                    y[i * 32 + j] = b[2 + j] as i8 as f32 * h(b, 0);
                }
            }
            Format::Q4_0 => {
                for j in 0..16 {
                    let x0 = (b[2 + j] & 0x0F) as i32 - 8;
                    let x1 = (b[2 + j] >> 4) as i32 - 8;
                    y[i * 32 + j] = x0 as f32 * h(b, 0);
                    y[i * 32 + j + 16] = x1 as f32 * h(b, 0);
                }
            }
            Format::Q4_1 => {
                for j in 0..16 {
                    y[i * 32 + j] = (b[4 + j] & 0x0F) as f32 * h(b, 0) + h(b, 2);
                    y[i * 32 + j + 16] = (b[4 + j] >> 4) as f32 * h(b, 0) + h(b, 2);
                }
            }
            Format::Q4_K => q4_k_c(b, &mut y[i * 256..]),
            Format::Q6_K => q6_k_c(b, &mut y[i * 256..]),
        }
    }
}

fn q4_k_c(b: &[u8], y: &mut [f32]) {
    let (d, min) = (h(b, 0), h(b, 2));
    let sc = &b[4..16];
    let get = |j: usize| -> (u8, u8) {
        if j < 4 {
            (sc[j] & 63, sc[j + 4] & 63)
        } else {
            (
                (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4),
                (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
            )
        }
    };
    let (mut q, mut yi, mut is) = (16, 0, 0);
    for _ in (0..256).step_by(64) {
        let (s1, m1) = get(is);
        let (d1, mm1) = (d * s1 as f32, min * m1 as f32);
        let (s2, m2) = get(is + 1);
        let (d2, mm2) = (d * s2 as f32, min * m2 as f32);
        for l in 0..32 {
            y[yi] = d1 * (b[q + l] & 0xF) as f32 - mm1;
            yi += 1;
        }
        for l in 0..32 {
            y[yi] = d2 * (b[q + l] >> 4) as f32 - mm2;
            yi += 1;
        }
        q += 32;
        is += 2;
    }
}

fn q6_k_c(b: &[u8], y: &mut [f32]) {
    let d = h(b, 208);
    let (mut ql, mut qh, mut sc, mut yo) = (0usize, 128usize, 192usize, 0usize);
    for _ in (0..256).step_by(128) {
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((b[ql + l] & 0xF) | ((b[qh + l] & 3) << 4)) as i32 - 32;
            let q2 = ((b[ql + l + 32] & 0xF) | (((b[qh + l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((b[ql + l] >> 4) | (((b[qh + l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((b[ql + l + 32] >> 4) | (((b[qh + l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |k: usize| b[sc + k] as i8 as f32;
            y[yo + l] = d * s(is) * q1 as f32;
            y[yo + l + 32] = d * s(is + 2) * q2 as f32;
            y[yo + l + 64] = d * s(is + 4) * q3 as f32;
            y[yo + l + 96] = d * s(is + 6) * q4 as f32;
        }
        yo += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

#[test]
fn matches_ggml_c_transcription() {
    let mut rng = Rng(42);
    for f in Format::ALL {
        for n in [1, 3, 17] {
            let blocks = random_blocks(&mut rng, f, n);
            let (mut got, mut want) = (
                vec![0f32; n * f.block_elems()],
                vec![1f32; n * f.block_elems()],
            );
            dequantize(f, &blocks, &mut got).unwrap();
            ggml_row(f, &blocks, &mut want);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{f:?} n={n}");
        }
    }
}

#[test]
fn known_values() {
    // Q4_1 with d = 0.5, m = -1: nibble q -> 0.5·q − 1.
    let mut blk = vec![0u8; 20];
    blk[..2].copy_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
    blk[2..4].copy_from_slice(&f16::from_f32(-1.0).to_bits().to_le_bytes());
    blk[4] = 0x3A;
    let mut out = [0f32; 32];
    dequantize(Format::Q4_1, &blk, &mut out).unwrap();
    assert_eq!((out[0], out[16], out[1]), (4.0, 0.5, -1.0));
}

#[test]
fn rejects_bad_lengths() {
    let mut out = [0f32; 33];
    assert!(matches!(
        dequantize(Format::Q8_0, &[0; 34], &mut out),
        Err(QuantError::NotBlockMultiple { len: 33, .. })
    ));
    let mut out = [0f32; 32];
    assert!(matches!(
        dequantize(Format::Q8_0, &[0; 33], &mut out),
        Err(QuantError::BadLength {
            expected: 34,
            found: 33,
            ..
        })
    ));
}
