use tc::{tensor_fn, Tensor};

// The zero padding in front of a convolution (Whisper's encoder conv1d,
// padding=1 on the time axis), and a padding value given at run time.
#[tensor_fn]
pub fn conv_input(x: Tensor![f32; B, C, T]) -> Tensor![f32; B, C, T + 2] {
    pad(x, 2, 1, 1, 0.0)
}

#[tensor_fn]
pub fn pad_with(x: Tensor![i32; N], v: i32) -> Tensor![i32; N + 3] {
    pad(x, 0, 2, 1, v)
}

fn main() {
    let x = tc::Tensor::from_vec(&[1, 1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let y = conv_input(x).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 0.0]);
    let x = tc::Tensor::from_vec(&[2], vec![5i32, 6]).unwrap();
    assert_eq!(pad_with(x, -1).unwrap().to_vec::<i32>().unwrap(), vec![-1, -1, 5, 6, -1]);
}
