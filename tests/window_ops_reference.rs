//! Convolution and pooling against PyTorch (`torch.nn.functional.conv1d`,
//! `conv2d`, `max_pool1d/2d`, `avg_pool1d/2d` with `count_include_pad`):
//! the fixture `tests/fixtures/window_ops_reference.json` was produced by
//! `scripts/window-ops-reference.py` (f64 reference rounded to f32). Every
//! case runs through tc's interpreter and JIT; shapes must be PyTorch's
//! and values within 1e-5 (the sums of up to 54 terms differ in rounding).

use tc::core::build::FnBuilder;
use tc::core::concrete::window_len;
use tc::core::ir::{Op, PoolKind, Window};
use tc::core::{Dim, Dtype, Type};
use tc::llvm::{CacheConfig, Jit, JitOptions};
use tc::runtime::contract::Arg;
use tc::Tensor;

fn usizes(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("integer") as usize)
        .collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn consts(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&d| Dim::c(d as i64)).collect()
}

/// The case as a one-op function, its arguments and PyTorch's output.
fn case(c: &serde_json::Value) -> (tc::core::ir::Function, Vec<Arg>, Vec<usize>, Vec<f32>) {
    let kind = c["kind"].as_str().unwrap();
    let xs = usizes(&c["x_shape"]);
    let window = Window {
        stride: usizes(&c["stride"]),
        padding: usizes(&c["padding"]),
        dilation: usizes(&c["dilation"]),
    };
    let ys = usizes(&c["y_shape"]);
    let mut b = FnBuilder::new("case");
    let x = b.param("x", Type::tensor(Dtype::F32, consts(&xs)));
    let mut args: Vec<Arg> = vec![Tensor::from_vec(&xs, floats(&c["x"])).unwrap().into()];
    let op = if kind.starts_with("conv") {
        let ws = usizes(&c["w_shape"]);
        let w = b.param("w", Type::tensor(Dtype::F32, consts(&ws)));
        args.push(Tensor::from_vec(&ws, floats(&c["w"])).unwrap().into());
        let groups = c["groups"].as_u64().unwrap() as usize;
        Op::Conv {
            window,
            groups,
            x,
            w,
        }
    } else {
        let kernel = usizes(&c["kernel"]);
        let kind = if kind.starts_with("max") {
            PoolKind::Max
        } else {
            PoolKind::Avg
        };
        Op::Pool {
            kind,
            kernel,
            window,
            x,
        }
    };
    b.returns(Type::tensor(Dtype::F32, consts(&ys)));
    let v = b.op(op);
    (b.finish(v), args, ys, floats(&c["y"]))
}

fn close(what: &str, got: &Tensor, shape: &[usize], want: &[f32]) {
    assert_eq!(got.shape(), shape, "{what}: PyTorch's shape");
    for (i, (g, w)) in got.to_vec::<f32>().unwrap().iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}: element {i}: tc {g} vs PyTorch {w}"
        );
    }
}

#[test]
fn conv_and_pooling_match_pytorch() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/window_ops_reference.json"
    ))
    .expect("fixture");
    let v: serde_json::Value = serde_json::from_str(&text).expect("fixture json");
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 14);
    let jit = Jit::new(CacheConfig {
        capacity: 64,
        specialize_after: 1,
        options: JitOptions::default(),
    });
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let (f, args, ys, y) = case(c);
        let interp = tc::runtime::exec::call(&f, &args, &|_| None).unwrap();
        close(&format!("{name} (interpreter)"), &interp, &ys, &y);
        let got = jit.call(&f, &args, &|_| None).unwrap();
        close(&format!("{name} (JIT)"), &got, &ys, &y);
    }
    assert_eq!(jit.stats().fallbacks, 0);
    // The formula on one known row: PyTorch's conv1d of 53 samples, kernel 10, stride 5.
    assert_eq!(window_len(53, 10, 5, 0, 1), Some(9));
}
