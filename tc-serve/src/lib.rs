//! tc-serve: an OpenAI-compatible inference server on tc.
//!
//! * `/v1/embeddings`: all-MiniLM-L6-v2 (a model folder), requests merged
//!   across clients into bucketed forward passes (`batcher`);
//! * `/v1/chat/completions`, `/v1/completions`: a Llama GGUF
//!   (SmolLM2-135M-Instruct), streamed over server-sent events, with
//!   continuous batching of decode steps (`generate`);
//! * `/v1/models`, `/health[/live|/ready]`, `/metrics` (Prometheus).
//!
//! The binary (`src/main.rs`) parses the flags and starts the accept loop
//! (`serve`); the tests build the same router in-process or spawn the
//! binary.

pub mod app;
pub mod batcher;
pub mod generate;
pub mod metrics;
pub mod serve;

/// The Llama architecture as tensor fns over a GGUF file, its tokenizer and
/// chat template, and its sampler. The facade's `smollm2` example and test
/// compile these same files (`#[path]`), so the server and the example
/// share one model.
pub mod llama {
    pub mod model;
    pub mod sampler;
    pub mod tokenizer;
}

/// all-MiniLM-L6-v2 as tensor fns; the facade's `minilm` and `peer_bench`
/// examples and its `minilm` test compile this same file (`#[path]`).
pub mod minilm;
