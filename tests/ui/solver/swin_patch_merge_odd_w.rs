use tc::{tensor_fn, Tensor};

// Swin Transformer patch merging: [B, H, W, C] → [B, H/2, 2, W/2, 2, C]. With
// only `W >= 2` (not `W % 2 == 0`) the volumes differ for odd W. Issue #11
// item 3: this used to be E0501 (budget) with no counterexample; the volume
// products are now abstracted and refined, and the minimal counterexample is
// found within the default budget.
#[tensor_fn(requires(H % 2 == 0, W >= 2))]
pub fn merge(x: Tensor![f32; B, H, W, C]) -> Tensor![f32; B, H / 2, 2, W / 2, 2, C] {
    reshape(x, [B, H / 2, 2, W / 2, 2, C])
}

fn main() {}
