//! The hostile-input suite: input a user should never write, fed through the
//! two expansion entry points on a thread whose stack is as large as rustc's
//! proc-macro thread (8 MiB, the main thread's default), so that a stack
//! overflow here is a compiler crash there (it aborts this test process).
//!
//! Every case states its outcome (expansion without error, or a compile error
//! containing a given text); none may panic. Families are generated over
//! sizes: below, at and above the limits of `limits` (the sizes at the limit
//! are found by bisection on `limits::check`, so they follow the limits if
//! those change). Run with `--nocapture` for the per-case time summary.

use std::fmt::Write as _;
use std::str::FromStr;
use std::time::{Duration, Instant};

use proc_macro2::TokenStream;

use crate::expand;
use crate::limits::{self, MAX_EXPR_TOKENS, MAX_NESTING};

/// What a case must produce.
#[derive(Clone, Debug)]
enum Expect {
    /// No compile error.
    Ok,
    /// A compile error whose text contains this.
    Err(&'static str),
    /// One of the two size-limit errors of `limits`.
    Limit,
    /// Either, but a diagnostic or a clean expansion (the solver may answer
    /// `unknown` within its budget on non-linear facts).
    Solver,
}

struct Case {
    name: String,
    attr: String,
    item: String,
    /// Through `tensor_module` (the item is the module) instead of `tensor_fn`.
    module: bool,
    expect: Expect,
}

fn fn_case(name: impl Into<String>, attr: &str, item: String, expect: Expect) -> Case {
    Case {
        name: name.into(),
        attr: attr.to_string(),
        item,
        module: false,
        expect,
    }
}

fn mod_case(name: impl Into<String>, body: String, expect: Expect) -> Case {
    Case {
        name: name.into(),
        attr: String::new(),
        item: format!("mod m {{ {body} }}"),
        module: true,
        expect,
    }
}

const SIG: &str = "fn f(x: Tensor![f32; N]) -> Tensor![f32; N]";
const TOO_DEEP: &str = "nested too deeply";
const TOO_LONG: &str = "too long or too deeply nested";

/// One nesting family: source at size n, and the outcome below the limits.
struct Family {
    name: &'static str,
    src: fn(usize) -> (String, String),
    within: Expect,
}

fn body(b: String) -> (String, String) {
    (String::new(), format!("{SIG} {{ {b} }}"))
}

fn families() -> Vec<Family> {
    let mut all = expr_families();
    all.extend(sig_families());
    all
}

/// A family's constructor, for the tables below.
fn fam(name: &'static str, src: fn(usize) -> (String, String), within: Expect) -> Family {
    Family { name, src, within }
}

/// Families nested in a body expression.
fn expr_families() -> Vec<Family> {
    vec![
        fam(
            "calls",
            |n| body(format!("{}x{}", "relu(".repeat(n), ")".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "parens",
            |n| body(format!("{}x{}", "(".repeat(n), ")".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "blocks",
            |n| body(format!("{}x{}", "{".repeat(n), "}".repeat(n))),
            Expect::Err("block expression"),
        ),
        fam(
            "brackets",
            |n| body(format!("sum(x, {}0{})", "[".repeat(n), "]".repeat(n))),
            Expect::Err(""),
        ),
        fam(
            "binary_chain",
            |n| body(format!("x{}", " + x".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "mul_chain",
            |n| body(format!("x{}", " * x".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "neg_chain",
            |n| body(format!("{}x", "- ".repeat(2 * n))),
            Expect::Ok,
        ),
        fam(
            "ref_chain",
            |n| body(format!("{}x", "& ".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "not_chain",
            |n| {
                (
                    String::new(),
                    format!(
                        "fn f(x: Tensor![bool; N]) -> Tensor![bool; N] {{ {}x }}",
                        "! ".repeat(n)
                    ),
                )
            },
            Expect::Ok,
        ),
        fam(
            "method_chain",
            |n| body(format!("x{}", ".relu()".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "left_deep",
            |n| body(format!("{}x{}", "(".repeat(n), ") + x + x + x".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "left_calls",
            |n| body(format!("{}x{}", "add(".repeat(n), ", x) + x".repeat(n))),
            Expect::Ok,
        ),
        fam(
            "right_mixed",
            |n| body(format!("{}x{}", "(x + x + x + ".repeat(n), ")".repeat(n))),
            Expect::Ok,
        ),
    ]
}

/// Families nested in a signature: dims, refinements, `requires`.
fn sig_families() -> Vec<Family> {
    vec![
        fam(
            "dim_parens",
            |n| {
                let d = format!("{}N{}", "(".repeat(n), ")".repeat(n));
                (
                    String::new(),
                    format!("fn f(x: Tensor![f32; {d}]) -> Tensor![f32; N] {{ x }}"),
                )
            },
            Expect::Ok,
        ),
        fam(
            "dim_chain",
            |n| {
                let d = format!("N{}", " + N".repeat(n));
                // `n` binds N: a variable only inside a compound dim is E0102.
                (
                    String::new(),
                    format!("fn f(n: Tensor![f32; N], x: Tensor![f32; {d}]) -> Tensor![f32; {d}] {{ x }}"),
                )
            },
            Expect::Ok,
        ),
        fam(
            "pred_chain",
            |n| {
                let p = format!("N > 0{}", " && N > 0".repeat(n));
                (
                    String::new(),
                    format!("fn f(x: Tensor![f32; N where {p}]) -> Tensor![f32; N] {{ x }}"),
                )
            },
            Expect::Ok,
        ),
        fam(
            "requires_parens",
            |n| {
                (
                    format!("requires({}N > 0{})", "(".repeat(n), ")".repeat(n)),
                    format!("{SIG} {{ x }}"),
                )
            },
            Expect::Ok,
        ),
    ]
}

/// The largest size of a family that passes the limits (bisection).
fn size_at_limit(f: &Family) -> usize {
    let fits = |n: usize| {
        let (a, i) = (f.src)(n);
        limits::check(&ts(&a)).is_ok() && limits::check(&ts(&i)).is_ok()
    };
    let (mut lo, mut hi) = (1usize, 4 * (MAX_EXPR_TOKENS + MAX_NESTING));
    assert!(fits(lo), "{}: size 1 must fit", f.name);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn nesting_cases(out: &mut Vec<Case>) {
    for f in families() {
        let limit = size_at_limit(&f);
        for n in [1, 8, 32, limit, limit + 1, 4 * limit, 20_000] {
            let (attr, item) = (f.src)(n);
            let expect = match n <= limit {
                true => f.within.clone(),
                false => Expect::Limit,
            };
            out.push(fn_case(
                format!("{}/{n}", f.name),
                &attr,
                item.clone(),
                expect.clone(),
            ));
            if n == limit + 1 {
                // Also inside a module (two more bracket levels: never fits).
                out.push(mod_case(
                    format!("{}/{n}/module", f.name),
                    format!("#[tensor_fn({attr})] {item}"),
                    Expect::Err(""),
                ));
            }
        }
    }
    // The limit errors name themselves.
    out.push(fn_case(
        "limit_message/nesting",
        "",
        body(format!(
            "{}x{}",
            "relu(".repeat(MAX_NESTING),
            ")".repeat(MAX_NESTING)
        ))
        .1,
        Expect::Err(TOO_DEEP),
    ));
    out.push(fn_case(
        "limit_message/chain",
        "",
        body(format!("x{}", " + x".repeat(10_000))).1,
        Expect::Err(TOO_LONG),
    ));
    out.push(mod_case(
        "limit_message/module_chain",
        format!("#[tensor_fn] {SIG} {{ x{} }}", " - x".repeat(10_000)),
        Expect::Err(TOO_LONG),
    ));
    // Many statements and many items are not one expression.
    out.push(fn_case(
        "many_lets/3000",
        "",
        body(format!("{} x", "let y = relu(x); ".repeat(3000))).1,
        Expect::Ok,
    ));
    let fns: String = (0..150)
        .map(|i| {
            format!(
                "#[tensor_fn] pub fn f{i}(x: Tensor![f32; N]) -> Tensor![f32; N] {{ relu(x) }} "
            )
        })
        .collect();
    out.push(mod_case("many_fns/150", fns, Expect::Ok));
}

const INT_DTYPES: &[(&str, i128, i128)] = &[
    ("i4", -8, 7),
    ("i8", -128, 127),
    ("i16", -32768, 32767),
    ("i32", -2_147_483_648, 2_147_483_647),
    ("i64", i64::MIN as i128, i64::MAX as i128),
];

const FLOAT_DTYPES: &[(&str, &str)] = &[
    ("f32", "3.4028235e38"),
    ("f16", "65504.0"),
    ("bf16", "3.3895313892515355e38"),
    ("f8e4m3", "448.0"),
    ("f8e5m2", "57344.0"),
];

fn int_literal_cases(out: &mut Vec<Case>) {
    for &(dt, lo, hi) in INT_DTYPES {
        let sig = format!("fn f(x: Tensor![{dt}; N]) -> Tensor![{dt}; N]");
        let bsig = format!("fn f(x: Tensor![{dt}; N]) -> Tensor![bool; N]");
        for (v, fits) in [(lo, true), (hi, true), (lo - 1, false), (hi + 1, false)] {
            let expect = match (fits, dt) {
                (true, _) => Expect::Ok,
                (false, "i64") => Expect::Err("integer literal out of range: expected a value in"),
                (false, _) => Expect::Err("integer literal out of range for"),
            };
            let lit = if v < 0 {
                format!("({v})")
            } else {
                v.to_string()
            };
            out.push(fn_case(
                format!("int/{dt}/mul/{v}"),
                "",
                format!("{sig} {{ x * {lit} }}"),
                expect.clone(),
            ));
            out.push(fn_case(
                format!("int/{dt}/scalar_left/{v}"),
                "",
                format!("{sig} {{ {lit} - x }}"),
                expect.clone(),
            ));
            out.push(fn_case(
                format!("int/{dt}/full/{v}"),
                "",
                format!("{sig} {{ full::<{dt}>([N], {lit}) }}"),
                expect.clone(),
            ));
            out.push(fn_case(
                format!("int/{dt}/cmp/{v}"),
                "",
                format!("{bsig} {{ x > {lit} }}"),
                expect.clone(),
            ));
        }
    }
    for (lit, what) in [
        ("99999999999999999999", "beyond_i64"),
        ("340282366920938463463374607431768211456", "beyond_i128"),
        ("0xFFFFFFFFFFFFFFFF", "hex_u64_max"),
        ("9223372036854775808", "i64_max_plus_1"),
    ] {
        let src = format!("fn f(x: Tensor![i64; N]) -> Tensor![i64; N] {{ x + {lit} }}");
        out.push(fn_case(
            format!("int/huge/{what}"),
            "",
            src,
            Expect::Err("integer literal out of range"),
        ));
    }
    out.push(fn_case(
        "int/i64_min_negated",
        "",
        "fn f(x: Tensor![i64; N]) -> Tensor![i64; N] { x + -9223372036854775808 }".into(),
        Expect::Ok,
    ));
    out.push(fn_case(
        "int/i4_scale",
        "",
        "fn f(x: Tensor![i4; N]) -> Tensor![i4; N] { x.scale(100) }".into(),
        Expect::Err("out of range for i4"),
    ));
    out.push(fn_case(
        "int/i8_add_scalar",
        "",
        "fn f(x: Tensor![i8; N]) -> Tensor![i8; N] { x.add_scalar(300) }".into(),
        Expect::Err("expected an integer in [-128, 127], found 300"),
    ));
}

fn float_literal_cases(out: &mut Vec<Case>) {
    for &(dt, max) in FLOAT_DTYPES {
        let sig = format!("fn f(x: Tensor![{dt}; N]) -> Tensor![{dt}; N]");
        let beyond = format!("{:e}", max.parse::<f64>().expect("max parses") * 1.1);
        for (lit, expect) in [
            (max.to_string(), Expect::Ok),
            (format!("-{max}"), Expect::Ok),
            (
                beyond.clone(),
                Expect::Err("float literal out of range for"),
            ),
            (
                format!("-{beyond}"),
                Expect::Err("float literal out of range for"),
            ),
            ("1e400".to_string(), Expect::Err("is not a finite number")),
            ("1e-400".to_string(), Expect::Ok),
        ] {
            let l = if lit.starts_with('-') {
                format!("({lit})")
            } else {
                lit.clone()
            };
            out.push(fn_case(
                format!("float/{dt}/add/{lit}"),
                "",
                format!("{sig} {{ x + {l} }}"),
                expect.clone(),
            ));
            out.push(fn_case(
                format!("float/{dt}/full/{lit}"),
                "",
                format!("{sig} {{ full::<{dt}>([N], {l}) }}"),
                expect.clone(),
            ));
        }
    }
    out.push(fn_case(
        "float/cmp_inf",
        "",
        "fn f(x: Tensor![f32; N]) -> Tensor![bool; N] { x < 1e309 }".into(),
        Expect::Err("is not a finite number"),
    ));
    out.push(fn_case(
        "float/f16_mask",
        "",
        "fn f(x: Tensor![f16; N]) -> Tensor![f16; N] { maximum(x, full::<f16>([N], -1e9)) }".into(),
        Expect::Err("|x| < 65520 (the largest f16 is 65504), found -1e9"),
    ));
    out.push(fn_case(
        "float/many_digits",
        "",
        format!("{SIG} {{ x * 1.{}e0 }}", "1".repeat(5000)),
        Expect::Ok,
    ));
}

fn dim_axis_const_cases(out: &mut Vec<Case>) {
    dim_axis_cases(out);
    module_const_cases(out);
}

/// Dim and axis literals out of range or of the wrong kind.
fn dim_axis_cases(out: &mut Vec<Case>) {
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "dim/beyond_i64",
            "fn f(x: Tensor![f32; 99999999999999999999]) -> Tensor![f32; N] { x }".into(),
            Expect::Err("dim literal does not fit in i64"),
        ),
        (
            "dim/string",
            "fn f(x: Tensor![f32; \"N\"]) -> Tensor![f32; N] { x }".into(),
            Expect::Err("expected a dim expression"),
        ),
        (
            "axis/beyond_i64",
            format!("{SIG} {{ sum_keepdims(x, [99999999999999999999]) }}"),
            Expect::Err("axis out of range"),
        ),
        (
            "axis/i64_max",
            format!("{SIG} {{ sum_keepdims(x, [9223372036854775807]) }}"),
            Expect::Err("out of range"),
        ),
        (
            "axis/negative",
            format!("{SIG} {{ sum_keepdims(x, [-1]) }}"),
            Expect::Err("non-negative"),
        ),
        (
            "axis/float",
            format!("{SIG} {{ sum_keepdims(x, [0.5]) }}"),
            Expect::Err("expected an axis"),
        ),
    ];
    for (n, src, e) in cases {
        out.push(fn_case(n, "", src, e));
    }
}

/// Module constants: out of range, overflowing, opaque, or a dim below 1.
fn module_const_cases(out: &mut Vec<Case>) {
    let use_k = "#[tensor_fn] pub fn f(x: Tensor![f32; K]) -> Tensor![f32; K] { relu(x) }";
    let consts: Vec<(&str, &str, Expect)> = vec![
        (
            "const/usize_max",
            "const K: usize = 18446744073709551615;",
            Expect::Err("module constant out of range"),
        ),
        (
            "const/u64_beyond_i64",
            "const K: u64 = 9223372036854775808;",
            Expect::Err("module constant out of range"),
        ),
        (
            "const/i64_max",
            "const K: i64 = 9223372036854775807;",
            Expect::Ok,
        ),
        (
            "const/overflow_add",
            "const K: i64 = 9223372036854775807 + 1;",
            Expect::Err("module constant overflows i64"),
        ),
        (
            "const/overflow_mul",
            "const A: i64 = 4611686018427387904; const K: i64 = A * 2;",
            Expect::Err("overflows i64: 4611686018427387904 * 2"),
        ),
        (
            "const/div_zero",
            "const K: usize = 8 / 0;",
            Expect::Err("division by zero"),
        ),
        (
            "const/rem_zero",
            "const K: usize = 8 % (2 - 2);",
            Expect::Err("remainder by zero"),
        ),
        (
            "const/negative_usize",
            "const K: usize = 2 - 3;",
            Expect::Err("out of range for `usize`"),
        ),
        (
            "const/u8_range",
            "const K: u8 = 300;",
            Expect::Err("out of range for `u8`"),
        ),
        (
            "const/wrapping_cast",
            "const K: usize = 300 as u8 as usize;",
            Expect::Err("would change 300"),
        ),
        (
            "const/negative_dim",
            "const K: i64 = -3;",
            Expect::Err("dimension `K` of `fn f` is -3"),
        ),
        (
            "const/zero_dim",
            "const K: i64 = 0;",
            Expect::Err("dimension `K` of `fn f` is 0"),
        ),
        (
            "const/opaque_used",
            "const K: usize = 1 << 4;",
            Expect::Err("cannot evaluate this initialiser"),
        ),
        (
            "const/opaque_call",
            "const K: usize = core::mem::size_of::<u64>();",
            Expect::Err("cannot evaluate this initialiser"),
        ),
        (
            "const/i64_min",
            "const K: i64 = -9223372036854775808; const J: i64 = K + 9223372036854775807 + 5;",
            Expect::Ok,
        ),
    ];
    for (n, c, e) in consts {
        let b = if n == "const/i64_min" {
            use_k.replace('K', "J")
        } else {
            use_k.to_string()
        };
        out.push(mod_case(n, format!("{c} {b}"), e));
    }
    out.push(mod_case("const/opaque_unused", "const SEED: u64 = 1 << 40; #[tensor_fn] pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] { relu(x) }".into(), Expect::Ok));
    out.push(mod_case("const/huge_unused_is_still_an_error", "const BIG: u64 = 18446744073709551615; #[tensor_fn] pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] { relu(x) }".into(), Expect::Err("module constant out of range")));
}

fn recursion_cases(out: &mut Vec<Case>) {
    let t = "Tensor![f32; N]";
    let f = |name: &str, b: &str| format!("#[tensor_fn] pub fn {name}(x: {t}) -> {t} {{ {b} }} ");
    out.push(mod_case(
        "rec/self",
        f("f", "f(x)"),
        Expect::Err("recursive call: `f → f`"),
    ));
    out.push(mod_case(
        "rec/shadowed_relu",
        f("relu", "relu(x)"),
        Expect::Err("`relu → relu`"),
    ));
    out.push(mod_case(
        "rec/mutual",
        f("f", "g(x)") + &f("g", "f(x)"),
        Expect::Err("`f → g → f`"),
    ));
    out.push(mod_case(
        "rec/three",
        f("a", "relu(b(x))") + &f("b", "c(x)") + &f("c", "exp(a(x))"),
        Expect::Err("`a → b → c → a`"),
    ));
    out.push(mod_case(
        "rec/through_let",
        f("f", "let y = relu(x); let z = g(y); z") + &f("g", "f(x)"),
        Expect::Err("`g → f → g`"),
    ));
    out.push(mod_case(
        "rec/shadow_without_cycle",
        f("relu", "exp(x)") + &f("g", "relu(x)"),
        Expect::Ok,
    ));
    out.push(mod_case(
        "rec/standalone_self",
        f("f", "x") + &f("h", "relu(x)"),
        Expect::Ok,
    ));
    out.push(fn_case(
        "rec/tensor_fn_self",
        "",
        format!("{SIG} {{ f(x) }}"),
        Expect::Err("unknown function `f`"),
    ));
    let chain: String = (0..60)
        .map(|i| {
            f(
                &format!("c{i}"),
                &if i == 59 {
                    "relu(x)".into()
                } else {
                    format!("c{}(x)", i + 1)
                },
            )
        })
        .collect();
    out.push(mod_case("rec/chain_60", chain, Expect::Ok));
    let ring: String = (0..60)
        .map(|i| f(&format!("r{i}"), &format!("r{}(x)", (i + 1) % 60)))
        .collect();
    out.push(mod_case("rec/ring_60", ring, Expect::Err("`r0 → r1 → r2")));
    out.push(mod_case(
        "rec/cycle_with_type_error",
        f("f", "g(x) + full::<i8>([N], 1)") + &f("g", "f(x)"),
        Expect::Err("`g → f → g`"),
    ));
    out.push(mod_case(
        "rec/duplicate_names",
        f("f", "relu(x)") + &f("f", "exp(x)"),
        Expect::Err("already defined"),
    ));
}

/// The cases that fit no size family, by category (in this order).
fn misc_cases(out: &mut Vec<Case>) {
    unicode_cases(out);
    nonlinear_cases(out);
    degenerate_cases(out);
    soup_cases(out);
    param_item_cases(out);
}

/// Unicode identifiers, dims, constants and literals.
fn unicode_cases(out: &mut Vec<Case>) {
    let m = |n: &str, body: &str, e: Expect| mod_case(n, body.to_string(), e);
    let fc = |n: &str, attr: &str, item: &str, e: Expect| fn_case(n, attr, item.to_string(), e);
    // Unicode.
    out.push(fc(
        "unicode/idents",
        "",
        "fn fü(xü: Tensor![f32; Ñ]) -> Tensor![f32; Ñ] { relu(xü) }",
        Expect::Ok,
    ));
    out.push(fc(
        "unicode/cjk_dim",
        "requires(维度 % 2 == 0)",
        "fn f(x: Tensor![f32; 维度]) -> Tensor![f32; 维度 / 2, 2] { reshape(x, [维度 / 2, 2]) }",
        Expect::Ok,
    ));
    out.push(fc(
        "unicode/string_in_body",
        "",
        &format!("{SIG} {{ \"héllo ∀\" }}"),
        Expect::Err("this literal"),
    ));
    out.push(fc(
        "unicode/string_dtype",
        "",
        "fn f(x: Tensor![\"f32\"; N]) -> Tensor![f32; N] { x }",
        Expect::Err(""),
    ));
    out.push(fc(
        "unicode/dtype_ident",
        "",
        "fn f(x: Tensor![f32ü; N]) -> Tensor![f32; N] { x }",
        Expect::Err(""),
    ));
    out.push(fc(
        "unicode/char_literal",
        "",
        &format!("{SIG} {{ x * 'é' }}"),
        Expect::Err("this literal"),
    ));
    out.push(m("unicode/module_const", "const ДЛИНА: usize = 4; #[tensor_fn] pub fn f(x: Tensor![f32; ДЛИНА]) -> Tensor![f32; ДЛИНА] { relu(x) }", Expect::Ok));
    out.push(fc(
        "unicode/raw_ident",
        "",
        "fn r#fn(r#x: Tensor![f32; N]) -> Tensor![f32; N] { relu(r#x) }",
        Expect::Ok,
    ));
}

/// Non-linear axioms and `requires`: the solver budget, never a hang.
fn nonlinear_cases(out: &mut Vec<Case>) {
    let fc = |n: &str, attr: &str, item: &str, e: Expect| fn_case(n, attr, item.to_string(), e);
    // Non-linear axioms and requires (solver budget: `Solver`).
    for (i, a) in [
        "X * X * X == Y",
        "X * Y == Y * X",
        "X * X == Y && Y * Y == Z",
        "X * X * X * X * X * X == Y",
        "X % Y == Z * Z",
    ]
    .iter()
    .enumerate()
    {
        out.push(fc(&format!("nonlinear/axiom/{i}"), &format!("axiom({a})"), "fn f(x: Tensor![f32; X], y: Tensor![f32; Y], z: Tensor![f32; Z]) -> Tensor![f32; Y] { y }", Expect::Solver));
    }
    out.push(fc(
        "nonlinear/reshape",
        "requires(X * X * X == Y)",
        "fn f(x: Tensor![f32; X, X, X]) -> Tensor![f32; Y] { reshape(x, [Y]) }",
        Expect::Solver,
    ));
    out.push(fc(
        "nonlinear/false_axiom",
        "axiom(X * X == 2)",
        "fn f(x: Tensor![f32; X]) -> Tensor![f32; X] { x }",
        Expect::Solver,
    ));
}

/// Absurd ranks, empty bodies, modules, items and `where` clauses.
fn degenerate_cases(out: &mut Vec<Case>) {
    let m = |n: &str, body: &str, e: Expect| mod_case(n, body.to_string(), e);
    let fc = |n: &str, attr: &str, item: &str, e: Expect| fn_case(n, attr, item.to_string(), e);
    // Absurd ranks.
    for r in [200, 1000] {
        let dims: Vec<String> = (0..r).map(|i| format!("D{i}")).collect();
        let d = dims.join(", ");
        // Rank 1000 has 1000 shape variables: the small suite budget may end in `unknown`.
        let e = if r <= 200 { Expect::Ok } else { Expect::Solver };
        out.push(fc(
            &format!("rank/{r}/relu"),
            "",
            &format!("fn f(x: Tensor![f32; {d}]) -> Tensor![f32; {d}] {{ relu(x) }}"),
            e.clone(),
        ));
        let axes: Vec<String> = (0..r).map(|i| i.to_string()).collect();
        out.push(fc(
            &format!("rank/{r}/sum_all"),
            "",
            &format!(
                "fn f(x: Tensor![f32; {d}]) -> Tensor![f32] {{ sum(x, [{}]) }}",
                axes.join(", ")
            ),
            e,
        ));
    }
    out.push(mod_case("const/compound_dim", "const K: i64 = -3; #[tensor_fn] pub fn f(x: Tensor![f32; K + 2]) -> Tensor![f32; K + 2] { relu(x) }".into(), Expect::Err("dimension `K + 2` of `fn f` is -1")));
    // Empty or degenerate.
    out.push(fc(
        "empty/body",
        "",
        &format!("{SIG} {{}}"),
        Expect::Err("must end with the tensor it returns"),
    ));
    out.push(m("empty/module", "", Expect::Ok));
    out.push(fc("empty/item", "", "", Expect::Err("")));
    out.push(fc(
        "empty/no_params",
        "",
        "fn f() -> Tensor![f32; 3] { full::<f32>([3], 0.0) }",
        Expect::Ok,
    ));
    out.push(fc(
        "empty/rank0",
        "",
        "fn f(x: Tensor![f32]) -> Tensor![f32] { relu(x) }",
        Expect::Ok,
    ));
    out.push(fc(
        "empty/semicolon_body",
        "",
        &format!("{SIG} {{ ; }}"),
        Expect::Err(""),
    ));
    out.push(fc(
        "soup/empty_where",
        "",
        "fn f(x: Tensor![f32; N where]) -> Tensor![f32; N] { x }",
        Expect::Ok,
    ));
    out.push(fc(
        "soup/where_outside",
        "",
        "fn f(x: Tensor![f32; N] where N > 0) -> Tensor![f32; N] { x }",
        Expect::Err("expected `,`"),
    ));
}

/// Token soup inside `Tensor![…]` and in the attribute.
fn soup_cases(out: &mut Vec<Case>) {
    let m = |n: &str, body: &str, e: Expect| mod_case(n, body.to_string(), e);
    let fc = |n: &str, attr: &str, item: &str, e: Expect| fn_case(n, attr, item.to_string(), e);
    // Token soup inside `Tensor![…]`.
    for (i, soup) in [
        "",
        ";",
        "f32;;",
        "f32; where",
        "f32; N,,",
        "f32; 'a",
        "f32; N; M",
        "f99; N",
        "f32; N where N",
        "f32; N where N > 0 > 1",
        "f32; fn",
        "f32; N..M",
        "f32; {N}",
        "f32; [N]",
        "f32; N as usize",
        "f32; N where N > 0,, M > 0",
        "; N",
        "f32 N",
        "f32; N + ",
        "f32; * N",
        "f32; N == M",
        "f32; N && M",
        "f32; -",
        "f32; N / ",
        "f32; #",
        "f32; N where &&",
        "f32; N where N > 0 where",
    ]
    .iter()
    .enumerate()
    {
        out.push(fc(
            &format!("soup/tensor/{i}"),
            "",
            &format!("fn f(x: Tensor![{soup}]) -> Tensor![f32; N] {{ x }}"),
            Expect::Err(""),
        ));
    }
    // Attribute garbage.
    for (i, a) in [
        "requires",
        "requires(,)",
        "foo(N > 0)",
        "requires(N > 0) axiom",
        "requires(N > 0),,",
        "\"str\"",
        "requires(N = 0)",
        "requires(fn)",
        "requires(N > 0; M > 0)",
        "axioms(x)",
        "requires[N > 0]",
        "requires{N > 0}",
        "requires(N > 0) requires",
        "#",
        "requires(N > \"0\")",
    ]
    .iter()
    .enumerate()
    {
        out.push(fc(
            &format!("attr/{i}"),
            a,
            &format!("{SIG} {{ x }}"),
            Expect::Err(""),
        ));
    }
    out.push(fc(
        "attr/empty_requires",
        "requires()",
        &format!("{SIG} {{ x }}"),
        Expect::Ok,
    ));
    out.push(Case {
        name: "attr/module_args".into(),
        attr: "x".into(),
        item: "mod m {}".into(),
        module: true,
        expect: Expect::Err("takes no arguments"),
    });
    out.push(m(
        "attr/name_value",
        &format!("#[tensor_fn = \"x\"] {SIG} {{ x }}"),
        Expect::Err("expected `#[tensor_fn(...)]`"),
    ));
}

/// Duplicated and odd parameters; items that are not a tensor fn.
fn param_item_cases(out: &mut Vec<Case>) {
    let m = |n: &str, body: &str, e: Expect| mod_case(n, body.to_string(), e);
    let fc = |n: &str, attr: &str, item: &str, e: Expect| fn_case(n, attr, item.to_string(), e);
    // Duplicated and odd parameters.
    out.push(fc(
        "params/duplicate",
        "",
        "fn f(x: Tensor![f32; N], x: Tensor![f32; N]) -> Tensor![f32; N] { x }",
        Expect::Ok,
    ));
    out.push(fc(
        "params/self",
        "",
        "fn f(self, x: Tensor![f32; N]) -> Tensor![f32; N] { x }",
        Expect::Err("cannot take `self`"),
    ));
    out.push(fc(
        "params/pattern",
        "",
        "fn f((a, b): Tensor![f32; N]) -> Tensor![f32; N] { a }",
        Expect::Err("plain identifier"),
    ));
    out.push(fc(
        "params/generic",
        "",
        "fn f<T>(x: Tensor![f32; N]) -> Tensor![f32; N] { x }",
        Expect::Err("takes no generics"),
    ));
    let many: Vec<String> = (0..300).map(|i| format!("x{i}: Tensor![f32; N]")).collect();
    out.push(fc(
        "params/300",
        "",
        &format!("fn f({}) -> Tensor![f32; N] {{ x299 }}", many.join(", ")),
        Expect::Ok,
    ));
    out.push(fc(
        "params/scalar_shadows_dim",
        "",
        "fn f(x: Tensor![f32; N], N: f32) -> Tensor![f32; N] { x * N }",
        Expect::Ok,
    ));
    out.push(fc("item/not_a_fn", "", "struct S;", Expect::Err("")));
    out.push(m("item/file_module", "", Expect::Ok));
    out.push(Case {
        name: "item/mod_decl".into(),
        attr: String::new(),
        item: "mod m;".into(),
        module: true,
        expect: Expect::Err("inline module"),
    });
}

fn all_cases() -> Vec<Case> {
    let mut out = Vec::new();
    nesting_cases(&mut out);
    int_literal_cases(&mut out);
    float_literal_cases(&mut out);
    dim_axis_const_cases(&mut out);
    recursion_cases(&mut out);
    misc_cases(&mut out);
    weight_struct_cases(&mut out);
    out
}

/// Weight structs (`params.rs`): odd structs and odd uses of a struct
/// parameter end in a diagnostic or a clean expansion, never a panic.
fn weight_struct_cases(out: &mut Vec<Case>) {
    const S: &str =
        "#[tensor_params] pub struct P { pub w: Tensor![f32; N], pub b: Tensor![f32; N] }";
    let uses: &[(&str, &str, Expect)] = &[
        ("field", "p.w + p.b", Expect::Ok),
        ("unknown_field", "p.q", Expect::Err("no field `q` on `P`")),
        ("bare", "p", Expect::Err("is a `P` of tensors")),
        ("field_of_field", "p.w.w", Expect::Err("compile_error")),
        ("method", "p.w()", Expect::Err("is a `P` of tensors")),
        ("dangling_dot", "x + p.", Expect::Err("compile_error")),
        ("double_dot", "p..w", Expect::Err("compile_error")),
        ("tuple_field", "p.0", Expect::Err("is a `P` of tensors")),
        ("in_brackets", "concat([p.w, p.b], 0)", Expect::Solver),
        (
            "whole_in_concat",
            "concat([p], 0)",
            Expect::Err("compile_error"),
        ),
        ("passed_whole", "g(p)", Expect::Ok),
        ("passed_twice", "g2(p, p)", Expect::Err("compile_error")),
    ];
    for (name, body, expect) in uses {
        let item = format!(
            "{S} #[tensor_fn] fn g(p: P) -> Tensor![f32; N] {{ p.w }} \
             #[tensor_fn] fn g2(p: P) -> Tensor![f32; N] {{ p.b }} \
             #[tensor_fn] fn f(x: Tensor![f32; N], p: P) -> Tensor![f32; N] {{ {body} }}"
        );
        out.push(mod_case(format!("params/{name}"), item, expect.clone()));
    }
    let structs: &[(&str, &str, Expect)] = &[
        ("empty", "#[tensor_params] pub struct P {}", Expect::Ok),
        (
            "tuple",
            "#[tensor_params] pub struct P(Tensor![f32; N]);",
            Expect::Err("named fields"),
        ),
        (
            "generic",
            "#[tensor_params] pub struct P<T> { pub w: T }",
            Expect::Err("no generics"),
        ),
        (
            "scalar_field",
            "#[tensor_params] pub struct P { pub w: f32 }",
            Expect::Err("is a tensor"),
        ),
        (
            "bad_dims",
            "#[tensor_params] pub struct P { pub w: Tensor![f32; N +] }",
            Expect::Err("compile_error"),
        ),
        (
            "bad_name",
            "#[tensor_params] pub struct P { #[tensor_name = 3] pub w: Tensor![f32; N] }",
            Expect::Err("expected a string"),
        ),
        (
            "unit",
            "#[tensor_params] pub struct P;",
            Expect::Err("named fields"),
        ),
    ];
    for (name, st, expect) in structs {
        let item = format!("{st} #[tensor_fn] fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {{ x }}");
        out.push(mod_case(
            format!("params/struct_{name}"),
            item,
            expect.clone(),
        ));
    }
}

fn ts(s: &str) -> TokenStream {
    TokenStream::from_str(s).expect("hostile case tokenizes")
}

/// Run one case; `Err(why)` when its outcome is not the expected one.
fn run(c: &Case) -> Result<(), String> {
    let (attr, item) = (ts(&c.attr), ts(&c.item));
    let out = if c.module {
        expand::tensor_module(attr, item)
    } else {
        expand::tensor_fn(attr, item)
    };
    let text = out.to_string();
    let is_err = text.contains("compile_error");
    if !is_err && syn::parse2::<syn::File>(out).is_err() {
        return Err(format!(
            "expansion is neither an error nor valid items: {text:.300}"
        ));
    }
    if text.contains("internal error") || text.contains("please report") {
        return Err(format!("internal error: {text:.300}"));
    }
    match (&c.expect, is_err) {
        (Expect::Ok, false) | (Expect::Solver, _) => Ok(()),
        (Expect::Err(want), true) if text.contains(want) => Ok(()),
        (Expect::Limit, true) if text.contains(TOO_DEEP) || text.contains(TOO_LONG) => Ok(()),
        (Expect::Limit, _) => Err(format!("expected a size-limit error, got: {text:.400}")),
        (Expect::Ok, true) => Err(format!("expected no error, got: {text:.400}")),
        (Expect::Err(want), _) => Err(format!(
            "expected an error containing {want:?}, got: {text:.400}"
        )),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[test]
fn hostile_inputs_never_crash() {
    let cases = all_cases();
    assert!(cases.len() >= 200, "only {} cases", cases.len());
    // rustc's main thread, where proc macros run: 8 MiB.
    let worker = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            // A deterministic, small solver budget keeps non-linear cases fast.
            tc_core::solver::set_rlimit(20_000);
            let mut times = Vec::new();
            let mut failures = Vec::new();
            for c in &cases {
                let t0 = Instant::now();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(c)));
                let dt = t0.elapsed();
                times.push((dt, c.name.clone()));
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => failures.push(format!("{}: {why}", c.name)),
                    Err(_) => failures.push(format!("{}: panicked", c.name)),
                }
            }
            (times, failures)
        })
        .expect("spawn the 8 MiB thread");
    let (mut times, failures) = worker.join().expect("the suite thread itself never panics");
    times.sort();
    let sorted: Vec<Duration> = times.iter().map(|(d, _)| *d).collect();
    let total: Duration = sorted.iter().sum();
    let mut report = format!(
        "hostile-input suite: {} cases, total {total:?}, p50 {:?}, p90 {:?}, max {:?}\nslowest:",
        sorted.len(),
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.9),
        sorted[sorted.len() - 1],
    );
    for (d, n) in times.iter().rev().take(8) {
        let _ = write!(report, "\n  {d:>12?}  {n}");
    }
    println!("{report}");
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        sorted.len(),
        failures.join("\n")
    );
}
