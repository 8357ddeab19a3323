//! SmolLM2's tokenizer, rebuilt from the metadata a GGUF file carries.
//!
//! A GGUF has no `tokenizer.json`; it stores a byte-level BPE vocabulary
//! (`tokenizer.ggml.model == "gpt2"`), its merges, a type per token and the
//! name of the pre-tokenizer (`tokenizer.ggml.pre`). This module turns those
//! into a `tokenizers::Tokenizer` the way llama.cpp and transformers read the
//! same file, renders the chat template with minijinja, and detokenizes a
//! stream of ids without ever cutting a UTF-8 character in half.

// Compiled into both the smollm2 example and its integration test, each of
// which uses only part of this API.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;

use minijinja::value::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, Tokenizer};

/// llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`: tokens such as `<|im_start|>`.
const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp's `LLAMA_TOKEN_TYPE_USER_DEFINED`: added tokens that are not special.
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The tokenizer metadata of a GGUF file, as read from its `tokenizer.*` keys.
#[derive(Clone, Debug, Default)]
pub struct TokenizerParts {
    /// `tokenizer.ggml.tokens`: the vocabulary, in id order, spelled in the
    /// byte-level alphabet (`Ġ` for a space and so on).
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.merges`: `"left right"` pairs, best first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.token_type`: one llama.cpp token type per token
    /// (1 normal, 3 control, 4 user-defined, ...). May be empty.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: u32,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: u32,
    /// `tokenizer.ggml.pre`: which pre-tokenizer the merges were learned with.
    pub pre: String,
    /// `tokenizer.chat_template`, a Jinja template, when the file has one.
    pub chat_template: Option<String>,
    /// `tokenizer.ggml.add_bos_token`. Kept for the caller: [`ChatTokenizer::encode`]
    /// never adds BOS itself, because a chat template already spells out
    /// whatever the model expects at the start.
    pub add_bos: bool,
}

/// Why building the tokenizer, encoding, decoding or rendering failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenizerError {
    /// The GGUF metadata does not describe a usable tokenizer.
    InvalidParts(String),
    /// The `tokenizers` crate rejected the vocabulary, the merges or the text.
    Tokenizers(String),
    /// An id that is not in the vocabulary.
    UnknownId(u32),
    /// The chat template failed to parse or to render.
    Template(String),
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerError::InvalidParts(m) => write!(f, "invalid tokenizer metadata: {m}"),
            TokenizerError::Tokenizers(m) => write!(f, "tokenizer error: {m}"),
            TokenizerError::UnknownId(id) => write!(f, "token id {id} is not in the vocabulary"),
            TokenizerError::Template(m) => write!(f, "chat template error: {m}"),
        }
    }
}

impl std::error::Error for TokenizerError {}

/// A byte-level BPE tokenizer with its chat template.
pub struct ChatTokenizer {
    /// The encoder; `None` once [`ChatTokenizer::release_encoder`] dropped it.
    tokenizer: Option<Tokenizer>,
    /// The raw bytes each id stands for. Decoding goes through this table
    /// rather than `Tokenizer::decode` so that [`StreamDecoder`] and
    /// [`ChatTokenizer::decode`] cannot disagree, and so that a partial UTF-8
    /// character can be held back instead of becoming U+FFFD.
    token_bytes: TokenBytes,
    bos: u32,
    eos: u32,
    chat_template: Option<String>,
    add_bos: bool,
}

/// Every token's bytes in one buffer: id `i` is `bytes[ends[i - 1]..ends[i]]`
/// (from 0 for id 0). A `Vec<u8>` per token cost a pointer, a length, a
/// capacity and an allocation each: about 2.7 MB for SmolLM2's 49,152
/// tokens, against the 0.5 MB of this table.
struct TokenBytes {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl TokenBytes {
    /// The table of `tokens`' bytes; `None` past 4 GiB of them.
    fn new(tokens: impl ExactSizeIterator<Item = Vec<u8>>) -> Option<TokenBytes> {
        let mut t = TokenBytes {
            bytes: Vec::new(),
            ends: Vec::with_capacity(tokens.len()),
        };
        for b in tokens {
            t.bytes.extend_from_slice(&b);
            t.ends.push(u32::try_from(t.bytes.len()).ok()?);
        }
        t.bytes.shrink_to_fit();
        Some(t)
    }

    fn get(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.bytes.get(start..end)
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// GPT-2's byte-to-character table: printable bytes stand for themselves and
/// the rest are shifted past U+00FF so every byte has a visible character.
fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
        let cp = if printable {
            u32::from(b)
        } else {
            shifted += 1;
            255 + shifted
        };
        // Every code point here is below U+0200, so the conversion cannot fail.
        table[b as usize] = char::from_u32(cp).unwrap_or('\0');
    }
    table
}

/// The inverse of [`bytes_to_unicode`], indexed by code point (all < 0x200).
fn unicode_to_bytes(table: &[char; 256]) -> Vec<Option<u8>> {
    let mut inverse = vec![None; 0x200];
    for (b, c) in table.iter().enumerate() {
        inverse[*c as usize] = Some(b as u8);
    }
    inverse
}

/// Bytes a token string decodes to: byte-level characters map back to their
/// byte; a token with any other character is literal text (an added token,
/// or a vocabulary entry the converter stored unspelled). This is the rule of
/// `tokenizers`' ByteLevel decoder, so both decoders agree.
fn token_to_bytes(token: &str, inverse: &[Option<u8>]) -> Vec<u8> {
    let mapped: Option<Vec<u8>> = token
        .chars()
        .map(|c| inverse.get(c as usize).copied().flatten())
        .collect();
    mapped.unwrap_or_else(|| token.as_bytes().to_vec())
}

/// The pre-tokenizer the merges of `pre` were learned with.
///
/// `smollm` (and the other llama.cpp pre-types that share its regexes:
/// starcoder, refact, command-r, codeshell, exaone, minerva-7b) first isolates
/// every `\p{N}` character, then applies GPT-2's regex. That is SmolLM's own
/// `tokenizer.json` (`Digits(individual_digits)` then
/// `ByteLevel(add_prefix_space=false, use_regex=true)`); `char::is_numeric`,
/// which `Digits` uses, is exactly `\p{N}`. Note that transformers' GGUF
/// loader does not know `smollm` and uses plain ByteLevel, which differs from
/// llama.cpp and the original tokenizer only where spaces precede a digit.
///
/// Any other `pre` falls back to plain GPT-2 ByteLevel splitting, which is
/// right for `gpt-2`/`default` and only approximate for vocabularies trained
/// with another regex (llama3, qwen2, ...).
fn pre_tokenizer_for(pre: &str) -> PreTokenizerWrapper {
    let byte_level = ByteLevel::new(false, true, true);
    match pre {
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            PreTokenizerWrapper::Sequence(Sequence::new(vec![
                PreTokenizerWrapper::Digits(Digits::new(true)),
                PreTokenizerWrapper::ByteLevel(byte_level),
            ]))
        }
        _ => PreTokenizerWrapper::ByteLevel(byte_level),
    }
}

impl ChatTokenizer {
    /// Build the tokenizer from a GGUF's `"gpt2"` (byte-level BPE) metadata.
    ///
    /// Control (type 3) and user-defined (type 4) tokens become added tokens,
    /// so `<|im_start|>` in a text is one id rather than a run of bytes.
    pub fn from_parts(p: TokenizerParts) -> Result<ChatTokenizer, TokenizerError> {
        let n = p.tokens.len();
        if n == 0 {
            return Err(TokenizerError::InvalidParts("empty vocabulary".into()));
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::InvalidParts(format!(
                "{n} tokens do not fit u32 ids"
            )));
        }
        if !p.token_types.is_empty() && p.token_types.len() != n {
            return Err(TokenizerError::InvalidParts(format!(
                "{} token types for {n} tokens",
                p.token_types.len()
            )));
        }
        for (name, id) in [("bos", p.bos), ("eos", p.eos)] {
            if id as usize >= n {
                return Err(TokenizerError::InvalidParts(format!(
                    "{name} id {id} is outside the vocabulary of {n}"
                )));
            }
        }

        let spelling = bytes_to_unicode();
        let inverse = unicode_to_bytes(&spelling);
        let in_alphabet = |t: &str| {
            t.chars()
                .all(|c| inverse.get(c as usize).copied().flatten().is_some())
        };

        // transformers respells a token stored as literal text into the byte
        // alphabet, so that the BPE model, which only ever sees byte-level
        // characters, can produce it. A later duplicate wins, as in a Python
        // dict built from the same list.
        let vocab: Vocab = p
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let key = if in_alphabet(t) {
                    t.clone()
                } else {
                    t.bytes().map(|b| spelling[b as usize]).collect()
                };
                (key, i as u32)
            })
            .collect();

        // llama.cpp looks for the separator from the second byte on, so a
        // merge whose left half is itself a space still splits correctly.
        let merges = p
            .merges
            .iter()
            .map(|m| {
                m.char_indices()
                    .skip(1)
                    .find(|&(_, c)| c == ' ')
                    .map(|(at, _)| (m[..at].to_string(), m[at + 1..].to_string()))
                    .ok_or_else(|| {
                        TokenizerError::InvalidParts(format!("merge {m:?} has no separator"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;

        // No unk token: every byte has a token in a byte-level vocabulary.
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        let mut tokenizer = Tokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer_for(&p.pre)));
        tokenizer.with_decoder(Some(ByteLevelDecoder::default()));

        let mut special = Vec::new();
        let mut user_defined = Vec::new();
        if p.token_types.is_empty() {
            // Without types, at least keep the two ids a chat loop relies on whole.
            for id in [p.bos, p.eos] {
                special.push(AddedToken::from(p.tokens[id as usize].clone(), true));
            }
        }
        for (t, ty) in p.tokens.iter().zip(&p.token_types) {
            match *ty {
                // A control token outside the byte alphabet is a llama.cpp
                // mislabel (transformers skips it too): adding it would give
                // it a fresh id past the model's vocabulary.
                TOKEN_TYPE_CONTROL if in_alphabet(t) => {
                    special.push(AddedToken::from(t.clone(), true).normalized(false))
                }
                TOKEN_TYPE_USER_DEFINED if in_alphabet(t) => {
                    user_defined.push(AddedToken::from(t.clone(), false).normalized(false))
                }
                _ => {}
            }
        }
        tokenizer
            .add_special_tokens(special)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        tokenizer
            .add_tokens(user_defined)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;

        let token_bytes = TokenBytes::new(p.tokens.iter().map(|t| token_to_bytes(t, &inverse)))
            .ok_or_else(|| TokenizerError::InvalidParts("over 4 GiB of token bytes".into()))?;

        Ok(ChatTokenizer {
            tokenizer: Some(tokenizer),
            token_bytes,
            bos: p.bos,
            eos: p.eos,
            chat_template: p.chat_template,
            add_bos: p.add_bos,
        })
    }

    /// Token ids for `text`, without BOS or EOS. Special tokens written in the
    /// text (`<|im_start|>`, `<|im_end|>`, ...) come out as their single ids,
    /// which is what a rendered chat prompt needs.
    /// An error once [`ChatTokenizer::release_encoder`] has run.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoder = self.tokenizer.as_ref().ok_or_else(|| {
            TokenizerError::Tokenizers(
                "the encoder was released: this tokenizer only decodes".into(),
            )
        })?;
        let encoding = encoder
            .encode(text, false)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens included. Invalid UTF-8 (a sequence
    /// cut short) becomes U+FFFD, as in every Hugging Face decoder.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.bytes_of(id)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The raw bytes one id stands for.
    fn bytes_of(&self, id: u32) -> Result<&[u8], TokenizerError> {
        self.token_bytes
            .get(id)
            .ok_or(TokenizerError::UnknownId(id))
    }

    /// Drop the encoder (the BPE model: its vocabulary both ways and its
    /// merges, about 8 MB for SmolLM2), keeping what decoding, the chat
    /// template and the special ids need: for a program that encodes its
    /// prompt once and then only decodes what it generates. [`encode`]
    /// fails from then on.
    ///
    /// [`encode`]: ChatTokenizer::encode
    pub fn release_encoder(&mut self) {
        self.tokenizer = None;
    }

    /// Render `messages` (`(role, content)` pairs) into a prompt.
    ///
    /// Uses the GGUF's own template, rendered as transformers does
    /// (`trim_blocks`, `lstrip_blocks`, Python string methods, `tojson`,
    /// `raise_exception`, and `bos_token`/`eos_token` in scope). Only a file
    /// without a template gets plain ChatML.
    pub fn apply_chat_template(
        &self,
        messages: &[(&str, &str)],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let Some(source) = self.chat_template.as_deref() else {
            return Ok(chatml(messages, add_generation_prompt));
        };

        let mut env = minijinja::Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        env.set_syntax(syntax);
        // HF templates are written for Python Jinja and call str/dict methods.
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );

        let messages: Vec<Value> = messages
            .iter()
            .map(|(role, content)| {
                let mut m = BTreeMap::new();
                m.insert("role".to_string(), Value::from(*role));
                m.insert("content".to_string(), Value::from(*content));
                Value::from(m)
            })
            .collect();
        let mut ctx = BTreeMap::new();
        ctx.insert("messages".to_string(), Value::from(messages));
        ctx.insert(
            "add_generation_prompt".to_string(),
            Value::from(add_generation_prompt),
        );
        ctx.insert("bos_token".to_string(), Value::from(self.token(self.bos)));
        ctx.insert("eos_token".to_string(), Value::from(self.token(self.eos)));

        let template = env
            .template_from_str(source)
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        template
            .render(Value::from(ctx))
            .map_err(|e| TokenizerError::Template(e.to_string()))
    }

    /// The text of a special token such as BOS, as a template writes it.
    fn token(&self, id: u32) -> String {
        self.bytes_of(id)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    }

    /// `tokenizer.ggml.bos_token_id`.
    pub fn bos(&self) -> u32 {
        self.bos
    }

    /// `tokenizer.ggml.eos_token_id`: generation stops here.
    pub fn eos(&self) -> u32 {
        self.eos
    }

    /// `tokenizer.ggml.add_bos_token`: whether a raw (non-chat) prompt should
    /// start with [`ChatTokenizer::bos`].
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Number of ids, i.e. rows of the model's embedding table.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }
}

/// The ChatML layout SmolLM2 was tuned on, for files without a template.
fn chatml(messages: &[(&str, &str)], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    for (role, content) in messages {
        out.push_str("<|im_start|>");
        out.push_str(role);
        out.push('\n');
        out.push_str(content);
        out.push_str("<|im_end|>\n");
    }
    if add_generation_prompt {
        out.push_str("<|im_start|>assistant\n");
    }
    out
}

/// Incremental detokenizer for streaming output.
///
/// Byte-level tokens can split one UTF-8 character (an emoji, a CJK
/// character) across several ids. `push` returns only characters whose bytes
/// have all arrived, holding back an unfinished tail, so concatenating every
/// `push` result gives the same text as decoding the whole sequence, except
/// for a tail still unfinished when the stream stops (see [`StreamDecoder::finish`]).
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// A decoder with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one id; returns the text it completes (possibly empty).
    pub fn push(&mut self, tok: &ChatTokenizer, id: u32) -> Result<String, TokenizerError> {
        self.pending.extend_from_slice(tok.bytes_of(id)?);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // The prefix was just validated, so this cannot fail.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // Truly invalid bytes will never complete: emit U+FFFD
                        // for them now, as a full decode would.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        // An unfinished character at the end: wait for more.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        Ok(out)
    }

    /// Flush what is still pending when the stream ends: an unfinished
    /// character becomes U+FFFD, as [`ChatTokenizer::decode`] would render it.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}
