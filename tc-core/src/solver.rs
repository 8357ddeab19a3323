//! The one module that talks to Z3.
//!
//! * One `z3::Solver` per thread, reused through push/pop: a fresh solver costs
//!   ~10 ms, push/check/pop ~0.1 ms, and a proc macro runs many queries.
//! * Budget by Z3's `rlimit` (a deterministic resource count), never wall time,
//!   so a verdict does not depend on machine load. `unknown` is a rejection
//!   (Section 3 §5 step 4), reported with a fixed message.
//! * Counterexamples are re-solved with `z3::Optimize`, minimising each
//!   user-visible variable in declaration order (lexicographic), so the same
//!   query prints the same assignment whichever solver state produced it.
//! * Results are cached per thread by a canonical form of (Γ, query), after a
//!   syntactic short-circuit; [`stats`] counts queries so benches can show it.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use z3::ast::{Bool, Int};
use z3::{Optimize, Params, SatResult, Solver};

use crate::ctx::Ctx;
use crate::diag::Counterexample;
use crate::dim::{Atom, Dim};
use crate::pred::{CmpOp, Pred};

/// Default resource budget per check. The whole test suite (every Section 2
/// rule, the layers of the examples, the MiniLM and GPT-2 blocks) passes at
/// 20,000; 100,000 leaves 5× headroom while a pathological non-linear query
/// (`X * X == 2 * Y * Y`) comes back `unknown` in under 0.1 s.
pub const DEFAULT_RLIMIT: u32 = 100_000;

/// Wall-clock backstop, milliseconds. Verdicts are governed by `rlimit`
/// (deterministic); Z3's non-linear engine does not always honour `rlimit`
/// promptly, so this guarantees "never a hang". It is far above what any
/// query within the resource budget takes, so it does not make verdicts
/// depend on machine load in practice.
pub const BACKSTOP_TIMEOUT_MS: u32 = 10_000;

/// The verdict on `Γ ⊨ p`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entailment {
    /// `Γ ∧ ¬p` is unsat: p holds for every σ satisfying Γ.
    Valid,
    /// p fails; the minimal failing assignment of the relevant user variables.
    Invalid(Counterexample),
    /// The solver budget ran out (reject, Section 3 §5).
    Unknown,
}

impl Entailment {
    /// True only for `Valid`.
    pub fn is_valid(&self) -> bool {
        matches!(self, Entailment::Valid)
    }
}

/// The verdict on `Sat(Γ)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Satisfiability {
    /// Some σ satisfies every fact.
    Sat,
    /// No σ does: the facts describe an empty type.
    Unsat,
    /// The solver budget ran out.
    Unknown,
}

/// Query counters, per thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Entailment and satisfiability questions asked.
    pub queries: u64,
    /// Answered syntactically (goal trivially true or literally assumed).
    pub syntactic: u64,
    /// Answered from the cache.
    pub cache_hits: u64,
    /// `check()` calls that reached Z3 (counterexample minimisation excluded).
    pub z3_checks: u64,
    /// Of which came back `unknown`.
    pub unknowns: u64,
}

struct State {
    solver: Solver,
    rlimit: u32,
    cache_enabled: bool,
    cache: HashMap<String, Answer>,
    stats: Stats,
}

#[derive(Clone)]
enum Answer {
    Ent(Entailment),
    Sat(Satisfiability),
}

impl State {
    fn new() -> State {
        let rlimit = std::env::var("TC_SOLVER_RLIMIT")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(DEFAULT_RLIMIT);
        let solver = Solver::new();
        apply_rlimit(&solver, rlimit);
        State {
            solver,
            rlimit,
            cache_enabled: true,
            cache: HashMap::new(),
            stats: Stats::default(),
        }
    }
}

fn apply_rlimit(solver: &Solver, rlimit: u32) {
    let mut p = Params::new();
    p.set_u32("rlimit", rlimit);
    p.set_u32("timeout", BACKSTOP_TIMEOUT_MS);
    solver.set_params(&p);
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        f(s.get_or_insert_with(State::new))
    })
}

/// Set this thread's per-check resource budget (Z3 `rlimit`; 0 = unlimited).
/// Clears the cache, since verdicts depend on the budget.
pub fn set_rlimit(rlimit: u32) {
    with_state(|s| {
        s.rlimit = rlimit;
        apply_rlimit(&s.solver, rlimit);
        s.cache.clear();
    })
}

/// This thread's current budget.
pub fn rlimit() -> u32 {
    with_state(|s| s.rlimit)
}

/// Turn this thread's result cache on or off (off also clears it).
pub fn set_cache_enabled(on: bool) {
    with_state(|s| {
        s.cache_enabled = on;
        s.cache.clear();
    })
}

/// This thread's counters.
pub fn stats() -> Stats {
    with_state(|s| s.stats)
}

/// Zero this thread's counters and clear its cache.
pub fn reset() {
    with_state(|s| {
        s.stats = Stats::default();
        s.cache.clear();
    })
}

/// Does Γ entail `goal`?
pub fn entails(ctx: &Ctx, goal: &Pred) -> Entailment {
    entails_with(ctx, &[], goal)
}

/// Does Γ together with `extra` entail `goal`? (`Γ; R₁ ⊨ R₂`, Section 3 §3.3.)
pub fn entails_with(ctx: &Ctx, extra: &[Pred], goal: &Pred) -> Entailment {
    let facts = collect_facts(ctx, extra);
    with_state(|s| {
        s.stats.queries += 1;
        if *goal == Pred::True || facts.contains(goal) {
            s.stats.syntactic += 1;
            return Entailment::Valid;
        }
        // The counterexample depends on the declaration order (it is printed
        // and minimised in that order), so the order is part of the key.
        let order = format!("ent[{}]", ctx.visible_vars().join(","));
        let key = cache_key(&order, &facts, Some(goal), s.rlimit);
        if s.cache_enabled {
            if let Some(Answer::Ent(e)) = s.cache.get(&key) {
                s.stats.cache_hits += 1;
                return e.clone();
            }
        }
        let mut enc = Encoder::default();
        let fact_asts: Vec<Bool> = facts.iter().map(|p| enc.pred(p)).collect();
        let neg = enc.pred(goal).not();
        s.solver.push();
        for f in fact_asts.iter().chain(enc.side.iter()) {
            s.solver.assert(f);
        }
        s.solver.assert(&neg);
        s.stats.z3_checks += 1;
        let r = s.solver.check();
        s.solver.pop(1);
        let out = match r {
            SatResult::Unsat => Entailment::Valid,
            SatResult::Unknown => {
                s.stats.unknowns += 1;
                Entailment::Unknown
            }
            SatResult::Sat => {
                let shown = relevant_vars(ctx, goal);
                let mut all = fact_asts.clone();
                all.extend(enc.side.iter().cloned());
                all.push(neg);
                match minimise(&mut enc, &all, &shown, s.rlimit) {
                    Some(cex) => Entailment::Invalid(cex),
                    None => {
                        s.stats.unknowns += 1;
                        Entailment::Unknown
                    }
                }
            }
        };
        if s.cache_enabled {
            s.cache.insert(key, Answer::Ent(out.clone()));
        }
        out
    })
}

/// Are Γ's facts together with `extra` jointly satisfiable? (`Sat(R)`, Section 1 §4.)
pub fn satisfiable(ctx: &Ctx, extra: &[Pred]) -> Satisfiability {
    let facts = collect_facts(ctx, extra);
    with_state(|s| {
        s.stats.queries += 1;
        if facts.contains(&Pred::False) {
            s.stats.syntactic += 1;
            return Satisfiability::Unsat;
        }
        let key = cache_key("sat", &facts, None, s.rlimit);
        if s.cache_enabled {
            if let Some(Answer::Sat(r)) = s.cache.get(&key) {
                s.stats.cache_hits += 1;
                return *r;
            }
        }
        let mut enc = Encoder::default();
        let asts: Vec<Bool> = facts.iter().map(|p| enc.pred(p)).collect();
        s.solver.push();
        for f in asts.iter().chain(enc.side.iter()) {
            s.solver.assert(f);
        }
        s.stats.z3_checks += 1;
        let r = s.solver.check();
        s.solver.pop(1);
        let out = match r {
            SatResult::Sat => Satisfiability::Sat,
            SatResult::Unsat => Satisfiability::Unsat,
            SatResult::Unknown => {
                s.stats.unknowns += 1;
                Satisfiability::Unknown
            }
        };
        if s.cache_enabled {
            s.cache.insert(key, Answer::Sat(out));
        }
        out
    })
}

/// Γ's facts plus extras, de-duplicated, in a stable order.
fn collect_facts(ctx: &Ctx, extra: &[Pred]) -> Vec<Pred> {
    let mut out: Vec<Pred> = Vec::new();
    for p in ctx.all_facts().into_iter().chain(extra.iter().cloned()) {
        let atoms = match p {
            Pred::And(ps) => ps,
            Pred::True => vec![],
            q => vec![q],
        };
        for a in atoms {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    out
}

/// Canonical form: facts sorted by their printed form, so Γs that differ only
/// in order share an entry (Section 1 §9 issue 3 as an efficiency measure).
fn cache_key(kind: &str, facts: &[Pred], goal: Option<&Pred>, rlimit: u32) -> String {
    let mut fs: Vec<String> = facts.iter().map(|p| p.to_string()).collect();
    fs.sort();
    fs.dedup();
    let g = goal.map(|g| g.to_string()).unwrap_or_default();
    format!("{kind}|{rlimit}|{}|{g}", fs.join(";"))
}

/// Variables worth printing: those of the goal (the others are unconstrained
/// by the failure), restricted to user-visible ones, in declaration order.
fn relevant_vars(ctx: &Ctx, goal: &Pred) -> Vec<String> {
    let set: BTreeSet<String> = goal.vars();
    let consts: BTreeSet<&str> = ctx.consts.iter().map(|(n, _)| n.as_str()).collect();
    let mut out: Vec<String> = ctx
        .visible_vars()
        .into_iter()
        .filter(|v| set.contains(v) && !consts.contains(v.as_str()))
        .collect();
    // Variables the query mentions that Γ does not declare still appear, after
    // the declared ones, sorted by name.
    for v in &set {
        if !ctx.is_bound(v) && !v.contains('#') && !out.contains(v) {
            out.push(v.clone());
        }
    }
    out
}

/// Lexicographically minimal model of `asserts` over `shown`.
fn minimise(
    enc: &mut Encoder,
    asserts: &[Bool],
    shown: &[String],
    rlimit: u32,
) -> Option<Counterexample> {
    let opt = Optimize::new();
    let mut p = Params::new();
    p.set_u32("rlimit", rlimit.saturating_mul(4));
    p.set_u32("timeout", BACKSTOP_TIMEOUT_MS);
    opt.set_params(&p);
    for a in asserts {
        opt.assert(a);
    }
    let vars: Vec<Int> = shown.iter().map(|v| enc.var(v)).collect();
    for v in &vars {
        opt.minimize(v);
    }
    match opt.check(&[]) {
        SatResult::Sat => {
            let model = opt.get_model()?;
            let mut out = Vec::new();
            for (name, v) in shown.iter().zip(&vars) {
                let val = model.eval(v, true)?.as_i64()?;
                out.push((name.clone(), val));
            }
            Some(Counterexample(out))
        }
        _ => None,
    }
}

/// Translates dims and predicates to Z3 terms.
#[derive(Default)]
struct Encoder {
    vars: HashMap<String, Int>,
    /// Quotient constants for divisions by a non-constant (Section 2 §13).
    quotients: HashMap<(Dim, Dim), Int>,
    /// Definitional constraints of those quotients.
    side: Vec<Bool>,
}

impl Encoder {
    fn var(&mut self, name: &str) -> Int {
        self.vars
            .entry(name.to_string())
            .or_insert_with(|| Int::new_const(name))
            .clone()
    }

    fn dim(&mut self, d: &Dim) -> Int {
        let mut terms: Vec<Int> = Vec::new();
        for (m, c) in d.terms() {
            let mut factors: Vec<Int> = vec![Int::from_i64(c)];
            for a in m {
                factors.push(self.atom(a));
            }
            terms.push(if factors.len() == 1 {
                factors.remove(0)
            } else {
                Int::mul(&factors)
            });
        }
        match terms.len() {
            0 => Int::from_i64(0),
            1 => terms.remove(0),
            _ => Int::add(&terms),
        }
    }

    fn atom(&mut self, a: &Atom) -> Int {
        match a {
            Atom::Var(v) => self.var(v),
            Atom::Div(x, y) | Atom::Mod(x, y) => {
                let xs = self.dim(x);
                let ys = self.dim(y);
                let is_div = matches!(a, Atom::Div(..));
                if y.as_const().is_some() {
                    // Division by a constant stays in Presburger: Z3's native div/mod.
                    return if is_div { xs.div(&ys) } else { xs.modulo(&ys) };
                }
                // §13: a fresh quotient q with x = y·q + r, 0 ≤ r < y whenever y ≥ 1.
                let key = ((**x).clone(), (**y).clone());
                let q = match self.quotients.get(&key) {
                    Some(q) => q.clone(),
                    None => {
                        let q = Int::new_const(format!("({x}) div ({y})"));
                        let r = Int::sub(&[xs.clone(), Int::mul(&[ys.clone(), q.clone()])]);
                        let defined = Bool::and(&[r.ge(Int::from_i64(0)), r.lt(&ys)]);
                        self.side.push(ys.ge(Int::from_i64(1)).implies(&defined));
                        self.quotients.insert(key, q.clone());
                        q
                    }
                };
                if is_div {
                    q
                } else {
                    Int::sub(&[xs, Int::mul(&[ys, q])])
                }
            }
        }
    }

    fn pred(&mut self, p: &Pred) -> Bool {
        match p {
            Pred::True => Bool::from_bool(true),
            Pred::False => Bool::from_bool(false),
            Pred::Cmp(a, op, b) => {
                let (x, y) = (self.dim(a), self.dim(b));
                match op {
                    CmpOp::Eq => x.eq(&y),
                    CmpOp::Ne => x.eq(&y).not(),
                    CmpOp::Le => x.le(&y),
                    CmpOp::Lt => x.lt(&y),
                    CmpOp::Ge => x.ge(&y),
                    CmpOp::Gt => x.gt(&y),
                }
            }
            Pred::And(ps) => {
                let v: Vec<Bool> = ps.iter().map(|q| self.pred(q)).collect();
                Bool::and(&v)
            }
            Pred::Or(ps) => {
                let v: Vec<Bool> = ps.iter().map(|q| self.pred(q)).collect();
                Bool::or(&v)
            }
            Pred::Not(q) => self.pred(q).not(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(vars: &[&str]) -> Ctx {
        let mut g = Ctx::new();
        for v in vars {
            g.declare(v);
        }
        g
    }

    #[test]
    fn entailment_and_counterexample() {
        let g = ctx(&["B", "S"]);
        assert!(entails(&g, &Pred::ge("B", 1)).is_valid());
        match entails(&g, &Pred::ge("B", 16)) {
            Entailment::Invalid(c) => assert_eq!(c.to_string(), "B = 1"),
            other => panic!("{other:?}"),
        }
        match entails(&g, &Pred::eq("B", "S")) {
            Entailment::Invalid(c) => assert_eq!(c.to_string(), "B = 1, S = 2"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn variable_division() {
        let mut g = ctx(&["D", "H"]);
        let dh = Dim::var("D").div(&Dim::var("H"));
        // Without divisibility, D / H * H = D fails.
        assert!(!entails(&g, &Pred::eq(dh.clone() * Dim::var("H"), "D")).is_valid());
        g.assume(Pred::eq(Dim::var("D").rem(&Dim::var("H")), 0));
        assert!(entails(&g, &Pred::eq(dh.clone() * Dim::var("H"), "D")).is_valid());
        assert!(entails(&g, &Pred::ge(dh, 1)).is_valid());
    }

    #[test]
    fn sat_and_cache() {
        reset();
        let mut g = ctx(&["B"]);
        g.assume(Pred::eq("B", 0));
        assert_eq!(satisfiable(&g, &[]), Satisfiability::Unsat);
        let g2 = ctx(&["B"]);
        assert_eq!(satisfiable(&g2, &[]), Satisfiability::Sat);
        let before = stats();
        assert_eq!(satisfiable(&g2, &[]), Satisfiability::Sat);
        let after = stats();
        assert_eq!(after.cache_hits, before.cache_hits + 1);
        assert_eq!(after.z3_checks, before.z3_checks);
    }

    #[test]
    fn budget_exhaustion_is_unknown() {
        // A non-linear query that needs real search: x·y·z = 2^30 + 1 with factors ≥ 2
        // together with a contradiction buried under many products.
        let mut g = ctx(&["X", "Y", "Z"]);
        g.assume(Pred::eq(
            Dim::var("X") * Dim::var("Y") * Dim::var("Z")
                - Dim::var("X") * Dim::var("X") * Dim::var("Y"),
            1_073_741_827,
        ));
        g.assume(Pred::ge("X", 2));
        set_rlimit(1);
        let r = entails(&g, &Pred::ge("Y", 5));
        set_rlimit(DEFAULT_RLIMIT);
        assert_eq!(r, Entailment::Unknown);
    }
}
