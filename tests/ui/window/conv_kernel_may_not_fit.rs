use tc::{tensor_fn, Tensor};

// wav2vec2's first feature-extractor conv (kernel 10, stride 5) on raw
// audio of any length T, summed over time: a clip shorter than the kernel
// has no window.
#[tensor_fn]
pub fn energy(audio: Tensor![f32; B, 1, T], w: Tensor![f32; 512, 1, 10]) -> Tensor![f32; B, 512] {
    sum(conv1d(audio, w, 5, 0), [2])
}

fn main() {}
