use tc::{tensor_fn, Tensor};

// `X * X == 2 * Y * Y` has no solution in positive integers (√2 is
// irrational), but deciding that is beyond the solver's budget: `unknown`
// is a rejection (Section 3 §5), with a fixed message.
#[tensor_fn(axiom(X * X == 2 * Y * Y))]
pub fn f(x: Tensor![f32; X, Y]) -> Tensor![f32; Y, X] {
    reshape(x, [Y, X])
}

fn main() {}
