use tc::{tensor_fn, Tensor};

// Every other time step: the stride-2 downsampling of Whisper's second
// encoder convolution, written as a strided slice; the result's length is
// ⌈T / 2⌉ = (T + 1) / 2, proven at compile time.
#[tensor_fn]
pub fn downsample(x: Tensor![f32; B, T, D]) -> Tensor![f32; B, (T + 1) / 2, D] {
    slice(x, 1, 0, T, 2)
}

fn main() {
    let x = tc::Tensor::from_vec(&[1, 5, 2], (0..10).map(|i| i as f32).collect()).unwrap();
    let y = downsample(x).unwrap();
    assert_eq!(y.shape(), &[1, 3, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 4.0, 5.0, 8.0, 9.0]);
}
