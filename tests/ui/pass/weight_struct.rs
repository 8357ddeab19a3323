use std::collections::BTreeMap;

use tc::{tensor_module, Tensor};

// GPT-2's feed-forward block (`h.N.mlp.c_fc` / `h.N.mlp.c_proj`, here with
// PyTorch-layout [out, in] weights) as a weight struct: one parameter,
// loaded and checked by name.
#[tensor_module]
mod gpt2_mlp {
    use tc::Tensor;

    pub const D: usize = 4;

    #[tensor_params]
    #[derive(Clone, Debug)]
    pub struct Mlp {
        #[tensor_name = "c_fc.weight"]
        pub w1: Tensor![f32; F, D],
        #[tensor_name = "c_fc.bias"]
        pub b1: Tensor![f32; F],
        #[tensor_name = "c_proj.weight"]
        pub w2: Tensor![f32; D, F],
        #[tensor_name = "c_proj.bias"]
        pub b2: Tensor![f32; D],
    }

    #[tensor_fn]
    pub fn linear(
        x: Tensor![f32; B, I],
        w: Tensor![f32; O, I],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, O] {
        matmul(x, transpose(w, [1, 0])) + broadcast(b, [B, O])
    }

    #[tensor_fn]
    pub fn mlp(x: Tensor![f32; B, D], p: Mlp) -> Tensor![f32; B, D] {
        let h = relu(linear(x, p.w1, p.b1));
        linear(h, p.w2, p.b2)
    }

    /// The struct passed on whole to another tensor fn.
    #[tensor_fn]
    pub fn residual(x: Tensor![f32; B, D], p: Mlp) -> Tensor![f32; B, D] {
        x + mlp(x, p)
    }
}

fn t(shape: &[usize], v: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, vec![v; n]).unwrap()
}

fn main() {
    let mut w: BTreeMap<String, Tensor> = BTreeMap::new();
    w.insert("h.0.mlp.c_fc.weight".into(), t(&[8, 4], 0.5));
    w.insert("h.0.mlp.c_fc.bias".into(), t(&[8], 1.0));
    w.insert("h.0.mlp.c_proj.weight".into(), t(&[4, 8], 0.25));
    w.insert("h.0.mlp.c_proj.bias".into(), t(&[4], 0.0));
    let p = gpt2_mlp::Mlp::load(&w, "h.0.mlp").unwrap();
    // x = 1: h = relu(4·0.5 + 1) = 3 (8 of them), out = 8·3·0.25 = 6, + x.
    let y = gpt2_mlp::residual(t(&[2, 4], 1.0), &p).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![7.0; 8]);
    // A weight of the wrong shape is refused at load, naming it.
    w.insert("h.0.mlp.c_proj.weight".into(), t(&[4, 6], 0.25));
    let e = gpt2_mlp::Mlp::load(&w, "h.0.mlp").unwrap_err();
    assert!(
        matches!(&e, tc::Error::Dim { param, axis: 1, expected: 8, found: 6, .. } if param == "h.0.mlp.c_proj.weight"),
        "{e}"
    );
    // The IR names the flattened parameters by field.
    let ir = gpt2_mlp::tc_ir("mlp").unwrap().to_string();
    assert!(ir.contains("p.w1"), "{ir}");
}
