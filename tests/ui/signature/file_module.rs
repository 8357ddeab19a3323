use tc::tensor_module;

// A macro on a file module sees only `mod layers;`.
#[tensor_module]
mod layers;

fn main() {}
