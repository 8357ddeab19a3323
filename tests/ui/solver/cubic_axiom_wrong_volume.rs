use tc::{tensor_fn, Tensor};

// A cubic axiom that does not give the needed volume: with `V == X * Y * Z`,
// `[X, Y, Z]` has volume `V`, not `V * Y`. Decided through the linear
// abstraction of the products, with a real, minimal counterexample (issue #11
// item 6) instead of a non-linear search.
#[tensor_fn(axiom(V == X * Y * Z))]
pub fn f(x: Tensor![f32; X, Y, Z], v: Tensor![f32; V]) -> Tensor![f32; V, Y] {
    reshape(x, [V, Y])
}

fn main() {}
