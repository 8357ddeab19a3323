use tc::{tensor_fn, Tensor};

// 127 nested calls: the deepest nesting tc-macros accepts in a body (128
// bracket levels with the body's braces) compiles under rustc's real
// conditions (the macro on rustc's main thread).
#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(relu(x)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))
}

fn main() {
    let x = tc::Tensor::from_vec(&[3], vec![-1.0f32, 0.5, 2.0]).unwrap();
    assert_eq!(f(x).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.5, 2.0]);
}
