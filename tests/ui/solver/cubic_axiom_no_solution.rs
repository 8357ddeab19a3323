use tc::{tensor_fn, Tensor};

// `X³ + Y³ == Z³` has no solution in positive integers (Fermat, n = 3), which
// no decision procedure for integer arithmetic can establish in general. Issue
// #11 item 6: this used to run into the 10 s wall-clock backstop; products are
// now abstracted to fresh variables and refined a fixed number of rounds, so
// the rejection is immediate and independent of machine load.
#[tensor_fn(axiom(X * X * X + Y * Y * Y == Z * Z * Z))]
pub fn f(x: Tensor![f32; X, Y, Z]) -> Tensor![f32; Z, Y, X] {
    reshape(x, [Z, Y, X])
}

fn main() {}
