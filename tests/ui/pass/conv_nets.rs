use tc::{tensor_fn, tensor_module, Tensor};

// LeNet-5 (LeCun et al. 1998) on 28×28 MNIST digits, as in PyTorch's
// tutorial: conv 5×5 (padding 2) → relu → max pool 2 → conv 5×5 → relu →
// max pool 2 → flatten → linear. Every shape is proven at compile time.
#[tensor_module]
mod lenet {
    use tc::Tensor;

    #[tensor_fn]
    pub fn features(
        x: Tensor![f32; B, 1, 28, 28],
        w1: Tensor![f32; 6, 1, 5, 5],
        w2: Tensor![f32; 16, 6, 5, 5],
    ) -> Tensor![f32; B, 16, 5, 5] {
        let h = max_pool2d(relu(conv2d(x, w1, 1, 2)), 2);
        max_pool2d(relu(conv2d(h, w2)), 2)
    }

    #[tensor_fn]
    pub fn logits(
        x: Tensor![f32; B, 1, 28, 28],
        w1: Tensor![f32; 6, 1, 5, 5],
        w2: Tensor![f32; 16, 6, 5, 5],
        fc: Tensor![f32; 400, 10],
    ) -> Tensor![f32; B, 10] {
        let f = features(x, w1, w2);
        matmul(reshape(f, [B, 400]), fc)
    }
}

// A ResNet basic block's convs at any resolution: 3×3 with padding 1 keeps
// H × W (the checker proves (H + 2 − 3) / 1 + 1 = H), the stride-2 one
// halves it, rounding up, and a depthwise 3×3 (groups = channels) keeps it.
#[tensor_fn]
pub fn same(x: Tensor![f32; B, C, H, W], w: Tensor![f32; O, C, 3, 3]) -> Tensor![f32; B, O, H, W] {
    conv2d(x, w, 1, 1)
}

#[tensor_fn]
pub fn down(x: Tensor![f32; B, C, H, W], w: Tensor![f32; O, C, 3, 3]) -> Tensor![f32; B, O, (H - 1) / 2 + 1, (W - 1) / 2 + 1] {
    conv2d(x, w, 2, 1)
}

#[tensor_fn]
pub fn depthwise(x: Tensor![f32; B, 32, H, W], w: Tensor![f32; 32, 1, 3, 3]) -> Tensor![f32; B, 32, H, W] {
    conv2d(x, w, 1, 1, 1, 32)
}

// A global average pool at a fixed 7×7 (ResNet's head) and an average over
// time with stride (a 1-d pool on [B, C, T]).
#[tensor_fn]
pub fn head(x: Tensor![f32; B, 512, 7, 7]) -> Tensor![f32; B, 512, 1, 1] {
    avg_pool2d(x, 7)
}

#[tensor_fn]
pub fn smooth(x: Tensor![f32; B, C, T]) -> Tensor![f32; B, C, (T - 1) / 2 + 1] {
    avg_pool1d(x, 3, 2, 1)
}

fn main() {
    let x = Tensor::from_vec(&[2, 1, 28, 28], (0..2 * 784).map(|i| (i % 17) as f32 / 17.0).collect()).unwrap();
    let w1 = Tensor::from_vec(&[6, 1, 5, 5], (0..150).map(|i| (i % 7) as f32 / 7.0 - 0.4).collect()).unwrap();
    let w2 = Tensor::from_vec(&[16, 6, 5, 5], (0..2400).map(|i| (i % 11) as f32 / 11.0 - 0.5).collect()).unwrap();
    let fc = Tensor::from_vec(&[400, 10], (0..4000).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect()).unwrap();
    let y = lenet::logits(x, w1, w2, fc).unwrap();
    assert_eq!(y.shape(), &[2, 10]);
    assert!(y.to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()));

    let x = Tensor::from_vec(&[1, 2, 5, 4], (0..40).map(|i| i as f32).collect()).unwrap();
    let w = Tensor::from_vec(&[3, 2, 3, 3], vec![0.5f32; 54]).unwrap();
    assert_eq!(same(x.clone(), w.clone()).unwrap().shape(), &[1, 3, 5, 4]);
    assert_eq!(down(x, w).unwrap().shape(), &[1, 3, 3, 2]);
    let x = Tensor::from_vec(&[1, 1, 5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
    // count_include_pad: (0 + 1 + 2) / 3, (2 + 3 + 4) / 3, (4 + 5 + 0) / 3.
    assert_eq!(smooth(x).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 3.0, 3.0]);
}
