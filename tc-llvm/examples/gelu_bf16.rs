//! A BF16 linear layer's epilogue as MiniLM's BF16 model runs it between
//! its products: the product's BF16 output widened, plus an f32 bias,
//! GELU (fast numerics), rounded back to BF16 for the next product, over
//! `[512, 1536]` (32 × 16 tokens of the intermediate layer) on one
//! thread. Prints the median and range of 9 runs; `asm` prints the
//! kernel's assembly instead, `ir` its optimised IR.
//!
//! `cargo run --release -p tc-llvm --example gelu_bf16 [-- asm|ir]`
use std::time::Instant;
use tc_core::build::FnBuilder;
use tc_core::ir::{BinaryOp, Op, UnaryOp};
use tc_core::{Dim, Dtype, Type};

fn main() {
    let (rows, cols) = (512usize, 1536usize);
    let mut b = FnBuilder::new("bias_gelu");
    let rc = vec![Dim::var("R"), Dim::var("C")];
    let x = b.param("x", Type::tensor(Dtype::BF16, rc.clone()));
    let bias = b.param("b", Type::tensor(Dtype::F32, vec![Dim::var("C")]));
    b.returns(Type::tensor(Dtype::BF16, rc.clone()));
    let xf = b.op(Op::Cast(Dtype::F32, x));
    let bb = b.op(Op::Broadcast(rc, bias));
    let s = b.op(Op::Binary(BinaryOp::Add, xf, bb));
    let g = b.op(Op::Unary(UnaryOp::Gelu, s));
    let r = b.op(Op::Cast(Dtype::BF16, g));
    let f = b.finish(r);
    let sigma = [
        ("R".to_string(), rows as i64),
        ("C".to_string(), cols as i64),
    ]
    .into_iter()
    .collect();
    let opts = tc_llvm::JitOptions {
        threads: 1,
        ..Default::default()
    };
    let c = tc_llvm::compile(&f, &sigma, opts).expect("compiles");
    match std::env::args().nth(1).as_deref() {
        Some("asm") => return println!("{}", tc_llvm::jit::assembly(c.ir()).unwrap()),
        Some("ir") => return println!("{}", tc_llvm::jit::optimised_ir(c.ir()).unwrap()),
        _ => {}
    }
    let xv: Vec<half::bf16> = (0..rows * cols)
        .map(|i| half::bf16::from_f32((i % 97) as f32 * 0.05 - 2.0))
        .collect();
    let args: Vec<tc_runtime::contract::Arg> = vec![
        tc_runtime::Tensor::from_slice(&[rows, cols], &xv)
            .unwrap()
            .into(),
        tc_runtime::Tensor::from_slice(&[cols], &vec![0.1f32; cols])
            .unwrap()
            .into(),
    ];
    let mut times: Vec<f64> = (0..10)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(c.run(&args).unwrap());
            t0.elapsed().as_secs_f64() * 1e6
        })
        .skip(1)
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "bias + GELU, BF16 [{rows}, {cols}]: {:.0} µs [{:.0}–{:.0}]",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
}
