use tc::{tensor_fn, Tensor};

// A GPT-2 block written as standalone fns: `block` calls `ln`, which a
// standalone `#[tensor_fn]` cannot see. The error says how to make the call
// checkable (a `#[tensor_module]`), without speaking of "this module".
#[tensor_fn]
pub fn ln(x: Tensor![f32; S, D]) -> Tensor![f32; S, D] {
    let mu = mean_keepdims(x, [1]);
    x - broadcast(mu, [S, D])
}

#[tensor_fn]
pub fn block(x: Tensor![f32; S, D]) -> Tensor![f32; S, D] {
    x + ln(x)
}

fn main() {}
