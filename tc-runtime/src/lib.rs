//! The tc runtime: tensors of all 11 dtypes, bit-exact casts (Section 2 §5),
//! the Section 4 reference interpreter and the runtime contract.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod alloc;
pub mod error;

pub use error::{Error, Result};
pub mod cast;
pub mod elem;
pub mod element;
mod mapped;
pub mod safetensors_io;
pub mod tensor;

pub use cast::convert;
pub use elem::Elem;
pub use element::{Element, F8E4M3, F8E5M2, I4};
pub use safetensors_io::{
    load_safetensors, load_safetensors_mapped, load_tensor, save_safetensors,
};
pub use tensor::{StorageId, Tensor};
pub mod contract;
pub mod exec;
pub mod gguf;
pub mod huge;
pub mod interp;
pub mod params;
pub mod pool;
pub mod qformat;
pub mod quant;
pub mod resident;

pub use contract::{bind, Arg};
pub use interp::{Handle, Heap, Interpreter};
