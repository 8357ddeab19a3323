//! Unit tests of the expansion entry points (as `proc_macro2` functions).
//!
//! The property tests feed random and garbled token streams through
//! `expand::tensor_fn` / `expand::tensor_module` (no `catch_unwind` here: a
//! panic fails the test) and require tokens back: either a `compile_error!`
//! or a parseable item.

use std::str::FromStr;

use proc_macro2::TokenStream;
use proptest::prelude::*;

use crate::expand;

fn ts(s: &str) -> TokenStream {
    TokenStream::from_str(s).expect("test source tokenizes")
}

fn has_compile_error(out: &TokenStream) -> bool {
    out.to_string().contains("compile_error")
}

/// Output is either an error or well-formed Rust items.
fn assert_well_formed(out: &TokenStream) {
    if has_compile_error(out) {
        return;
    }
    if let Err(e) = syn::parse2::<syn::File>(out.clone()) {
        panic!("expansion is neither an error nor valid items: {e}\n{out}");
    }
}

const GOOD: &[(&str, &str)] = &[
    ("", "pub fn linear(x: Tensor![f32; B, I], w: Tensor![f32; I, O], b: Tensor![f32; O]) -> Tensor![f32; B, O] { \
     matmul(x, w) + broadcast(b, [B, O]) }"),
    ("", "fn norm(x: Tensor![f32; B, S, D], eps: f32) -> Tensor![f32; B, S, D] { \
     let m = mean_keepdims(x, [2]); let c = x - broadcast(m, [B, S, D]); \
     let v = mean_keepdims(c * c, [2]); c * broadcast(rsqrt(v + eps), [B, S, D]) }"),
    ("requires(D % H == 0)", "fn heads(x: Tensor![f32; B, S, D], h: Tensor![f32; H]) -> Tensor![f32; B, H, S, D / H] { \
     transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3]) }"),
    ("requires(S >= K)", "fn conv(x: Tensor![f32; B, S], w: Tensor![f32; K]) -> Tensor![f32; B, S - K + 1] { \
     let n = dim(&x, 1); slice(x, 1, 0, n - K + 1) }"),
    ("", "fn mask(x: Tensor![f32; S, S]) -> Tensor![f32; S, S] { \
     let i = iota::<i64>([S, S], 0); let j = iota::<i64>([S, S], 1); \
     select(le(j, i), x, full::<f32>([S, S], -1e9)) }"),
    ("", "fn q(x: Tensor![f32; N], s: f32) -> Tensor![i8; N] { let y: Tensor![f32; N] = round(x.scale(s)); \
     maximum(minimum(y, 127.0), -128.0).cast::<i8>() }"),
];

#[test]
fn good_functions_expand() {
    for (attr, src) in GOOD {
        let out = expand::tensor_fn(ts(attr), ts(src));
        assert!(
            !has_compile_error(&out),
            "unexpected error for {src}:\n{out}"
        );
        assert_well_formed(&out);
    }
}

#[test]
fn errors_keep_the_signature() {
    let out = expand::tensor_fn(
        TokenStream::new(),
        ts("pub fn f(a: Tensor![f32; M, K], b: Tensor![f32; N, P]) -> Tensor![f32; M, P] { matmul(a, b) }"),
    );
    let s = out.to_string();
    assert!(s.contains("compile_error"), "{s}");
    assert!(s.contains("contraction"), "{s}");
    assert!(s.contains("pub fn f"), "{s}");
    assert!(
        s.contains("fails when K = 1 , N = 2") || s.contains("fails when K = 1, N = 2"),
        "{s}"
    );
}

#[test]
fn module_expands_calls_and_consts() {
    let out = expand::tensor_module(
        TokenStream::new(),
        ts("mod m { use tc::Tensor; const HID: usize = 2 * 8; \
            #[tensor_fn] pub fn up(x: Tensor![f32; B, D], w: Tensor![f32; D, HID]) -> Tensor![f32; B, HID] { matmul(x, w) } \
            #[tensor_fn] pub fn act(x: Tensor![f32; B, D], w: Tensor![f32; D, HID]) -> Tensor![f32; B, HID] { gelu(up(x, w)) } }"),
    );
    assert!(!has_compile_error(&out), "{out}");
    assert_well_formed(&out);
    let s = out.to_string();
    assert!(
        s.contains("__tc_ir_up") && s.contains("__tc_resolve"),
        "{s}"
    );
}

#[test]
fn file_module_is_an_error() {
    let out = expand::tensor_module(TokenStream::new(), ts("mod m;"));
    assert!(out.to_string().contains("inline module"), "{out}");
}

/// Signatures that parse but are refused by formation (Section 1 §4).
const REFUSED: &[(&str, &str)] = &[
    // Compound dims that do not determine their variable (Section 2 §18).
    ("", "fn f(x: Tensor![f32; N + N % 2]) -> Tensor![f32; N + N % 2] { x }"),
    ("", "fn f(x: Tensor![f32; D], w: Tensor![f32; D, F / 8]) -> Tensor![f32; D] { x }"),
    ("requires(Q > 1)", "fn f(x: Tensor![f32; N]) -> Tensor![f32; N] { x }"),
    ("requires(N > 2, N < 1)", "fn f(x: Tensor![f32; N]) -> Tensor![f32; N] { x }"),
    ("", "fn f(x: Tensor![f32; A, B], y: Tensor![f32; A * B]) -> Tensor![f32; A * B] { y }"),
    ("", "fn f(x: Tensor![f32; D], h: Tensor![f32; H]) -> Tensor![f32; D / H] { reshape(x, [D / H]) }"),
    ("", "fn f(x: Tensor![f32; N]) -> Tensor![f32; M] { x }"),
    ("", "fn f(x: Tensor![f32; N]) -> Tensor![f32; N / 0] { x }"),
    ("", "fn f(x: Tensor![f32; N, 0]) -> Tensor![f32; N] { x }"),
];

fn count_errors(out: &TokenStream) -> usize {
    out.to_string().matches("compile_error").count()
}

/// A refused signature is reported once, at itself: callers of it, however
/// they call it (right or wrong arity, any shapes), add no error — no
/// "cannot infer", arity or shape error derived from a signature that is
/// already an error.
#[test]
fn refused_callee_adds_no_error_at_callers() {
    for (attr, f) in REFUSED {
        let alone = format!("mod m {{ #[tensor_fn({attr})] {f} }}");
        let with_callers = format!(
            "mod m {{ #[tensor_fn({attr})] {f} \
             #[tensor_fn] fn g(x: Tensor![f32; N]) -> Tensor![f32; N] {{ relu(f(x)) }} \
             #[tensor_fn] fn h(a: Tensor![f32; A, B], b: Tensor![f32; B]) -> Tensor![f32; A, B] {{ f(a, b) }} }}"
        );
        let base = count_errors(&expand::tensor_module(TokenStream::new(), ts(&alone)));
        let out = expand::tensor_module(TokenStream::new(), ts(&with_callers));
        assert!(base > 0, "not refused: {f}");
        assert_eq!(
            count_errors(&out),
            base,
            "callers of {f} got errors:\n{out}"
        );
        assert_well_formed(&out);
    }
}

// ------------------------------------------------------------------ fuzzing

const VOCAB: &[&str] = &[
    "fn",
    "f",
    "g",
    "pub",
    "x",
    "y",
    "w",
    "Tensor",
    "!",
    "f32",
    "bf16",
    "i32",
    "i8",
    "bool",
    "f64",
    ";",
    ",",
    "B",
    "S",
    "D",
    "H",
    "K",
    "where",
    "%",
    "/",
    "*",
    "+",
    "-",
    "==",
    ">=",
    "<",
    ">",
    "&&",
    "||",
    "0",
    "1",
    "2",
    "3",
    "0.5",
    "-1e9",
    "->",
    ":",
    "let",
    "=",
    "matmul",
    "matmul_i32",
    "dq_matmul",
    "relu",
    "exp",
    "sum",
    "sum_keepdims",
    "max",
    "mean",
    "argmax",
    "reshape",
    "broadcast",
    "slice",
    "concat",
    "gather",
    "topk",
    "cumsum",
    "pad",
    "rope_pairs",
    "rope_halves",
    "sdpa",
    "transpose",
    "select",
    "full",
    "iota",
    "::",
    "cast",
    "dim",
    "&",
    ".",
    "return",
    "requires",
    "axiom",
    "mod",
    "const",
    "usize",
    "#",
    "tensor_fn",
    "if",
    "for",
    "in",
    "_",
    "eps",
    "scale",
    "mut",
    "self",
    "'a",
    "\"s\"",
];

#[derive(Clone, Debug)]
enum Piece {
    Atom(usize),
    Group(u8, Vec<Piece>),
}

fn piece() -> impl Strategy<Value = Piece> {
    let leaf = (0..VOCAB.len()).prop_map(Piece::Atom);
    leaf.prop_recursive(4, 48, 8, |inner| {
        (0u8..3, prop::collection::vec(inner, 0..8)).prop_map(|(d, v)| Piece::Group(d, v))
    })
}

fn render(ps: &[Piece], out: &mut String) {
    for p in ps {
        match p {
            Piece::Atom(i) => {
                out.push_str(VOCAB[*i]);
                out.push(' ');
            }
            Piece::Group(d, v) => {
                let (o, c) = [("(", ")"), ("[", "]"), ("{", "}")][*d as usize % 3];
                out.push_str(o);
                render(v, out);
                out.push_str(c);
                out.push(' ');
            }
        }
    }
}

fn pieces() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..24).prop_map(|v| {
        let mut s = String::new();
        render(&v, &mut s);
        s
    })
}

/// Token-level mutations of a good function: delete, duplicate or replace
/// tokens (keeping brackets balanced by only touching non-bracket tokens).
fn mutated() -> impl Strategy<Value = String> {
    (
        0..GOOD.len(),
        prop::collection::vec((0u8..3, any::<prop::sample::Index>(), 0..VOCAB.len()), 1..6),
    )
        .prop_map(|(g, muts)| {
            let mut toks: Vec<String> = tokenize(GOOD[g].1);
            for (kind, at, v) in muts {
                let candidates: Vec<usize> = toks
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| !matches!(t.as_str(), "(" | ")" | "[" | "]" | "{" | "}"))
                    .map(|(i, _)| i)
                    .collect();
                if candidates.is_empty() {
                    break;
                }
                let i = candidates[at.index(candidates.len())];
                match kind {
                    0 => {
                        toks.remove(i);
                    }
                    1 => {
                        let t = toks[i].clone();
                        toks.insert(i, t);
                    }
                    _ => toks[i] = VOCAB[v].to_string(),
                }
            }
            toks.join(" ")
        })
}

fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in s.chars() {
        if "()[]{},;".contains(ch) || ch.is_whitespace() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            if !ch.is_whitespace() {
                out.push(ch.to_string());
            }
        } else {
            cur.push(ch);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn run_all(attr: &str, item: &str) {
    let (Ok(a), Ok(i)) = (TokenStream::from_str(attr), TokenStream::from_str(item)) else {
        return;
    };
    assert_well_formed(&expand::tensor_fn(a.clone(), i.clone()));
    assert_well_formed(&expand::tensor_module(a, i.clone()));
    let module = format!("mod m {{ #[tensor_fn({attr})] {item} #[tensor_fn] fn other(x: Tensor![f32; N]) -> Tensor![f32; N] {{ f(x) }} }}");
    if let Ok(m) = TokenStream::from_str(&module) {
        assert_well_formed(&expand::tensor_module(TokenStream::new(), m));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn random_items_never_panic(item in pieces(), attr in pieces()) {
        run_all(&attr, &item);
    }

    #[test]
    fn random_signatures_never_panic(params in pieces(), ret in pieces(), attr in pieces()) {
        run_all(&attr, &format!("fn f({params}) -> {ret} {{ x }}"));
        run_all("", &format!("fn f(x: Tensor![{params}]) -> Tensor![{ret}] {{ x }}"));
    }

    #[test]
    fn random_bodies_never_panic(body in pieces()) {
        run_all("requires(D % H == 0)", &format!(
            "fn f(x: Tensor![f32; B, S, D], y: Tensor![f32; D, D], h: Tensor![f32; H], eps: f32) -> Tensor![f32; B, S, D] {{ {body} }}"
        ));
    }

    #[test]
    fn mutated_good_functions_never_panic(src in mutated(), attr in prop::sample::select(vec!["", "requires(S >= K)", "requires(D % H == 0)", "axiom(P == B * S)"])) {
        run_all(attr, &src);
    }
}

/// Dim parameters (Section 1 §6 site 1): well-formed ones expand to a
/// `usize` parameter, which `IntoArgs` passes as `Arg::Dim`; malformed ones are compile errors
/// (never a panic) with the signature still emitted, so callers see no
/// secondary errors.
#[test]
fn dim_parameters_expand_or_fail_cleanly() {
    let good = [
        ("requires(D % H == 0)", "pub fn split(x: Tensor![f32; B, S, D], heads: Dim![H]) -> Tensor![f32; B, H, S, D / H] { \
          transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3]) }"),
        ("", "pub fn ones(n: Dim![N]) -> Tensor![f32; N, N] { full::<f32>([N, N], 1.0) }"),
        ("", "pub fn named(N: Dim![N]) -> Tensor![f32; N] { full::<f32>([N], 1.0) }"),
        ("", "pub fn twice(x: Tensor![f32; W], w2: Dim![2 * W]) -> Tensor![f32; 2 * W] { concat([x, x], 0) }"),
    ];
    for (attr, src) in good {
        let out = expand::tensor_fn(ts(attr), ts(src));
        assert!(
            !has_compile_error(&out),
            "unexpected error for {src}:\n{out}"
        );
        assert_well_formed(&out);
        // The size is passed as the `usize` it is (`IntoArgs` makes it
        // `Arg::Dim`), moved into the call with the other parameters.
        let s = out.to_string();
        assert!(s.contains("call_embedded"), "{s}");
        assert!(!s.contains("Arg :: from"), "{s}");
    }
    let bad = [
        "Dim![]",
        "Dim![H, W]",
        "Dim![H where H > 1]",
        "Dim![0]",
        "Dim![-1]",
        "Dim![99999999999999999999]",
        "Dim![H * W]",
        "Dim![F % 8]",
        "Dim![H +]",
    ];
    for ty in bad {
        let src = format!("pub fn f(x: Tensor![f32; W, H], d: {ty}) -> Tensor![f32; W, H] {{ x }}");
        let out = expand::tensor_fn(ts(""), ts(&src));
        assert!(has_compile_error(&out), "no error for {ty}:\n{out}");
        assert!(
            out.to_string().contains("pub fn f"),
            "signature not re-emitted for {ty}"
        );
    }
}

/// The whole-fn cache (`fn_cache.rs`): a clean fn expanded from its entry
/// gives the tokens its check gave; an edited fn, and a fn with errors,
/// are checked (the errors every time, never stored).
#[test]
fn the_whole_fn_cache_expands_as_the_check_does() {
    let dir = std::env::temp_dir().join(format!("tc-fn-cache-expand-{}", std::process::id()));
    tc_core::solver::set_proof_cache(Some(&dir));
    let fns = dir.join("fns");
    let count = || std::fs::read_dir(&fns).map_or(0, |d| d.count());
    let (attr, item) = (ts(GOOD[2].0), ts(GOOD[2].1));
    let cold = expand::tensor_fn(attr.clone(), item.clone()).to_string();
    assert_eq!(count(), 1, "a clean fn is stored");
    let warm = expand::tensor_fn(attr.clone(), item.clone()).to_string();
    assert_eq!(warm, cold, "expanded from the entry as checked");
    // An edit (here of the attribute) is another key: checked, stored beside.
    let _ = expand::tensor_fn(ts("requires(D % H == 0, H >= 2)"), item.clone());
    assert_eq!(count(), 2);
    // A fn with an error is never stored, and reports it every time.
    let bad = ts("fn bad(x: Tensor![f32; N]) -> Tensor![f32; M] { x }");
    for _ in 0..2 {
        assert!(has_compile_error(&expand::tensor_fn(ts(""), bad.clone())));
    }
    assert_eq!(count(), 2);
    tc_core::solver::set_proof_cache(None);
    std::fs::remove_dir_all(&dir).unwrap();
}
