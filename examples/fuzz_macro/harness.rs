//! The main of a generated batch crate (`examples/fuzz_macro/main.rs`
//! writes it): for each program, the IR `#[tensor_module]` embedded
//! against the builder's checked IR, then the same arguments through the
//! macro's fn on the interpreter and on the JIT, against the builder's
//! program on the interpreter.
//!
//! One line per program on stdout, `seed S ir I interp R jit J` (each
//! `ok` or a kind), then detail lines starting with two spaces; the
//! driver reads them back.
#![allow(dead_code)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use tc_core::diag::SpanId;
use tc_core::ir::Function;
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::Tensor;

use crate::gen::{self, GenConfig, Prepared, Verdict};

/// What the driver and every batch generate with: the default mix without
/// the real-sizes class (matmul chains at sizes whose JIT compile and run
/// take seconds: their IR is a few ops the other programs cover), and with
/// `f` taking a `Dim![…]` parameter now and then (a `usize` from Rust).
pub fn config() -> GenConfig {
    let mut c = GenConfig::default();
    c.real_pct = 0;
    c.dim_params = true;
    c.matmul_i32 = true;
    c
}

/// The value budget of a macro run (small: the point is the front end).
pub const BUDGET: usize = 1 << 14;

/// One rendered program in a batch.
pub struct Entry {
    /// Its seed.
    pub seed: u64,
    /// The module's `tc_ir`.
    pub ir: fn(&str) -> Option<&'static Function>,
    /// Its `f`, arguments read from the slice.
    pub call: fn(&[Arg]) -> Result<Tensor, tc::Error>,
}

/// A tensor argument.
pub fn tensor(a: &Arg) -> Tensor {
    match a {
        Arg::Tensor(t) => t.clone(),
        _ => panic!("not a tensor argument"),
    }
}

fn elem(a: &Arg) -> Elem {
    match a {
        Arg::Scalar(e) => *e,
        _ => panic!("not a scalar argument"),
    }
}

/// A float scalar argument (every float dtype takes an `f32`).
pub fn float(a: &Arg) -> f32 {
    elem(a).as_f32().expect("float scalar")
}

/// An `i64` scalar argument.
pub fn int64(a: &Arg) -> i64 {
    elem(a).as_i64().expect("int scalar")
}

/// An `i32` scalar argument (the fuzzer draws it within the dtype).
pub fn int32(a: &Arg) -> i32 {
    int64(a) as i32
}

/// An `i16` scalar argument.
pub fn int16(a: &Arg) -> i16 {
    int64(a) as i16
}

/// An `i8` or `i4` scalar argument.
pub fn int8(a: &Arg) -> i8 {
    int64(a) as i8
}

/// A bool scalar argument.
pub fn boolean(a: &Arg) -> bool {
    elem(a).as_bool().expect("bool scalar")
}

/// A dim argument.
pub fn size(a: &Arg) -> usize {
    match a {
        Arg::Dim(n) => *n,
        _ => panic!("not a dim argument"),
    }
}

/// `f` with every span zeroed, its module constants sorted, a weight
/// struct's fields named as plain parameters and each shape variable's
/// `α ≥ 0` opt-in marked where its predicates state it. Spans: the builder numbers them
/// one way, the front end another (one per token it may report at), and a
/// span is where an error points, not what a program means. The opt-in:
/// the front end marks `ShapeVar::allow_zero` from the refinements and
/// `requires` (`tc_macros::parse`), the builder leaves it to them, and
/// every reader (the checker's Γ, the call rule, the run-time contract)
/// takes the union of both, so the two spellings mean the same.
pub fn canonical(f: &Function) -> Function {
    let mut f = f.clone();
    let mut preds: Vec<tc_core::Pred> = f.sig.requires.iter().map(|r| r.node.clone()).collect();
    for p in &f.sig.params {
        if let tc_core::Type::Tensor(t) = &p.ty {
            preds.extend(t.refs.iter().cloned());
        }
    }
    let zero = tc_core::ctx::zero_opt_ins(&preds);
    for v in &mut f.sig.vars {
        v.allow_zero |= zero.contains(&v.name);
    }
    // Module constants are a map: the front end lists them by name, the
    // builder in declaration order.
    f.sig.consts.sort();
    // A weight struct's field is named as it is read (`w.x1`); the builder
    // names the same parameter `x1`.
    for p in &mut f.sig.params {
        if let Some(n) = p.name.strip_prefix("w.") {
            p.name = n.to_string();
        }
    }
    let z = SpanId(0);
    f.ret_span = z;
    for i in &mut f.body {
        i.span = z;
        i.annot_span = z;
        i.arg_spans.clear();
        i.attr_spans.clear();
    }
    let s = &mut f.sig;
    (s.span, s.ret_span) = (z, z);
    s.ret_dim_spans.clear();
    for p in &mut s.params {
        p.span = z;
        p.dim_spans.clear();
        p.ref_spans.clear();
    }
    for r in s.requires.iter_mut().chain(s.axioms.iter_mut()) {
        r.span = z;
    }
    for b in &mut f.dim_bindings {
        b.span = z;
    }
    f
}

/// Where two canonical functions part, for the report (the printed form
/// leaves out some fields).
fn first_difference(a: &Function, b: &Function) -> String {
    let (x, y) = (&a.sig, &b.sig);
    let parts: [(&str, String, String); 7] = [
        (
            "shape variables",
            format!("{:?}", x.vars),
            format!("{:?}", y.vars),
        ),
        (
            "module constants",
            format!("{:?}", x.consts),
            format!("{:?}", y.consts),
        ),
        (
            "parameters",
            format!("{:?}", x.params),
            format!("{:?}", y.params),
        ),
        (
            "requires",
            format!("{:?}", x.requires),
            format!("{:?}", y.requires),
        ),
        (
            "return type",
            format!("{:?}", x.ret),
            format!("{:?}", y.ret),
        ),
        (
            "dim bindings",
            format!("{:?}", a.dim_bindings),
            format!("{:?}", b.dim_bindings),
        ),
        ("body", format!("{:?}", a.body), format!("{:?}", b.body)),
    ];
    for (what, p, q) in parts {
        if p != q {
            return format!("{what}: macro {p} / builder {q}");
        }
    }
    "elsewhere".into()
}

type Out = Result<Tensor, String>;

fn guard(f: impl FnOnce() -> Result<Tensor, tc::Error>) -> Out {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(format!("error {}: {e}", gen::err_kind(&e))),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panic: {msg}"))
        }
    }
}

/// The IR of every fn of the program, macro against builder.
fn compare_ir(e: &Entry, case: &gen::Case, detail: &mut Vec<String>) -> &'static str {
    let builder = case.callees.iter().chain([&case.checked]);
    let mut verdict = "ok";
    for ck in builder {
        let name = &ck.func.sig.name;
        let Some(m) = (e.ir)(name) else {
            detail.push(format!("`{name}`: the module embeds no IR for it"));
            verdict = "missing";
            continue;
        };
        let (a, b) = (canonical(m), canonical(&ck.func));
        if a != b {
            detail.push(format!(
                "`{name}` differs: {}; macro:\n{m}\nbuilder:\n{}",
                first_difference(&a, &b),
                ck.func
            ));
            verdict = "differs";
        }
    }
    verdict
}

/// Same kind of outcome, same bits (or the same kind of error).
fn same_exact(a: &Out, b: &Out) -> Result<(), String> {
    match (a, b) {
        (Ok(x), Ok(y)) => match gen::compare(x, y, gen::Taint::Exact) {
            Verdict::Same => Ok(()),
            Verdict::Unchecked => Err("unchecked".into()),
            Verdict::Differs(k, d) => Err(format!("{k}: {d}")),
        },
        (Err(x), Err(y)) if kind(x) == kind(y) => Ok(()),
        _ => Err(format!("{} vs {}", short(a), short(b))),
    }
}

fn kind(e: &str) -> &str {
    e.split(':').next().unwrap_or(e)
}

fn short(o: &Out) -> String {
    match o {
        Ok(t) => format!("a value {:?} {:?}", t.dtype(), t.shape()),
        Err(e) => e.lines().next().unwrap_or("").to_string(),
    }
}

/// The JIT's result against the interpreter's, with the fuzzer's oracle.
fn jit_verdict(case: &gen::Case, got: &Out, want: &Out) -> Result<(), String> {
    let opts = tc_llvm::Jit::global().config().options;
    match (got, want) {
        (Ok(g), Ok(w)) => {
            let taint = gen::taint(&case.checked, &case.callees, opts);
            let fs = &case.program.callees;
            let bound = gen::bound_of(case, &case.callees, fs, opts);
            match gen::compare_within(g, w, taint, bound.as_ref()) {
                Verdict::Same | Verdict::Unchecked => Ok(()),
                Verdict::Differs(k, d) => Err(format!("{k}: {d}")),
            }
        }
        _ => same_exact(got, want),
    }
}

/// One program: its verdict line and details.
fn check(e: &Entry, cfg: &GenConfig) -> (String, Vec<String>) {
    let mut detail = Vec::new();
    let case = match gen::prepare(e.seed, cfg, BUDGET) {
        Prepared::Ready(c) => c,
        _ => return (format!("seed {} unprepared", e.seed), detail),
    };
    let ir = compare_ir(e, &case, &mut detail);
    let fs = case.program.callees.clone();
    let resolve = |n: &str| fs.iter().find(|f| f.sig.name == n);
    let builder = guard(|| tc_runtime::exec::call(&case.program.main, &case.args, &resolve));
    let interp = guard(|| tc::with_backend(tc::Backend::Interpreter, || (e.call)(&case.args)));
    let jit = guard(|| tc::with_backend(tc::Backend::Jit, || (e.call)(&case.args)));
    let mut verdict = |name: &str, r: Result<(), String>| match r {
        Ok(()) => "ok",
        Err(d) => {
            detail.push(format!("{name}: {d}"));
            "differs"
        }
    };
    let i = verdict("interpreter", same_exact(&interp, &builder));
    let j = verdict("jit", jit_verdict(&case, &jit, &builder));
    let line = format!("seed {} ir {ir} interp {i} jit {j}", e.seed);
    (line, detail)
}

/// The batch's main.
pub fn main(entries: &[Entry]) {
    std::panic::set_hook(Box::new(|_| {}));
    let cfg = config();
    for e in entries {
        let (line, detail) = check(e, &cfg);
        println!("{line}");
        for d in detail {
            for l in d.lines() {
                println!("  {l}");
            }
        }
    }
}
