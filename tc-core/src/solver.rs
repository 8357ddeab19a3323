//! The one module that talks to Z3.
//!
//! **A verdict is a function of the program alone** (issue #11 item 4). A
//! solver reused through push/pop by every check on a thread kept learned
//! lemmas and AST ids from earlier checks: the Swin patch merge was accepted on
//! a fresh thread and rejected (E0501) right after an unrelated check
//! (`tests/determinism.rs` pins the family: orders, threads, previous checks).
//! Now each checked function gets a Z3 context of its own ([`scoped`], entered
//! by `check_function`), whose queries share one solver through push/pop; a
//! query outside any scope runs in a fresh context. Facts are asserted in a
//! canonical order (sorted by printed form), and the result cache lives only
//! as long as the scope, so what a function is told depends on its own queries
//! alone. Cost (issue #48, docs/perf-log.md "Build-time cost"): the context
//! is made at the scope's first query that reaches Z3, never for a function
//! whose queries are all answered before it; the solver is told its logic
//! (`QF_LIA`) before first use, which makes context and solver ~15 M
//! instructions instead of ~52 M (Z3's default tactic builds a strategy for
//! every logic).
//!
//! **Before Z3**: a goal that is syntactically a fact, one that interval
//! reasoning proves, and a fact set that a simple σ satisfies are answered
//! here (`solver/fast.rs`); they are proofs, so no verdict changes (the corpus of
//! `tests/determinism.rs` is checked both ways).
//!
//! **The persistent proof cache** (`solver/disk.rs`, off unless
//! [`set_proof_cache`] names a directory): Z3's answers keyed by the
//! scope's query history, so an unchanged function makes no Z3 call on the
//! next build, and a changed one gets exactly its cold answers.
//!
//! **Budget by Z3's `rlimit`** (a deterministic resource count), never wall
//! time: no check has a timeout, so no verdict depends on machine load. A check
//! that comes back `unknown` is retried with ten times the rlimit, up to a
//! ceiling ([`Budget`]; issue #11 item 3), the same for counterexample
//! minimisation; only then is it `unknown`, a rejection (Section 3 §5) whose
//! message names the budget ([`budget_note`]).
//!
//! **Every query Z3 sees is linear** (Presburger with `div`/`mod` by constants,
//! which Z3 decides and where it honours `rlimit`; issue #11 item 6). Each
//! distinct product of two or more atoms — from axioms (Section 2 §14), reshape
//! volumes (§10) or the quotient definitions of §13 (`x = y·q + r`) — becomes a
//! fresh integer `m = a · b` (longer products as a chain of binary ones). Z3
//! then solves the linear *abstraction*:
//! * Soundness. Every real model extends to a model of the abstraction (give
//!   each `m` the value of its product), and every lemma added below holds for
//!   real products. So an `unsat` abstraction proves the real query unsat: the
//!   abstraction can only lose completeness (a valid obligation may become
//!   unprovable, an error), never prove something false.
//! * Lemmas, all true of integers: sign (`a, b ≥ 0 ⇒ m ≥ 0`, …), monotonicity
//!   (`a ≥ 1 ∧ b ≥ 0 ⇒ m ≥ b`), and for an entailment, each equality fact `p = 0`
//!   multiplied by the cofactors that turn one of its monomials into one of the
//!   goal's (`P = X·Y` gives `P·Z = X·Y·Z`), so polynomial identities that follow
//!   from the facts stay provable by linear reasoning.
//! * Refinement. A model of the abstraction is checked against the products;
//!   when some `m ≠ a·b` at values `(a₀, b₀)`, the tangent lemmas at that point
//!   (`(a−a₀)(b−b₀) ≥ 0 ⇒ m ≥ b₀a + a₀b − a₀b₀`, and `≤` for the other
//!   quadrants) exclude it, and Z3 is asked again, at most
//!   [`REFINEMENT_ROUNDS`] times; a model consistent with every product is a
//!   real model. Non-convergence is `unknown`, reached in milliseconds.
//! * Axioms are still re-checked at run time with the concrete σ (§14).
//!
//! **Counterexamples** are minimised by bounded descent with plain solver
//! checks (never `z3::Optimize`, which crashed when an rlimit ran out), each
//! user-visible variable in declaration order (lexicographic), with the
//! same refinement: a
//! minimum of the abstraction that is consistent with the products is the
//! minimum of the real query (every real model is a model of the abstraction).
//! Results are cached per scope by the canonical query after the syntactic
//! and `fast` short-circuits; [`stats`] counts queries so benches can show it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use z3::ast::{Bool, Int};
use z3::{Config, Model, Params, SatResult, Solver};

use crate::ctx::Ctx;
use crate::diag::Counterexample;
use crate::dim::{Atom, Dim};
use crate::pred::{CmpOp, Pred};
use crate::profile;

mod disk;
mod fast;
mod worker;

/// The rlimit of a check's first attempt. The whole test suite (every
/// Section 2 rule, the layers of the examples, the MiniLM and GPT-2 blocks)
/// passes at 20,000; 100,000 leaves 5× headroom.
pub const DEFAULT_RLIMIT: u32 = 100_000;

/// The default ceiling of the escalation: 100× the first attempt. The Swin
/// patch-merge reshape needed ~5,000,000 before non-linear terms were
/// abstracted; a linear check that exhausts this is not worth waiting for.
pub const MAX_RLIMIT: u32 = 10_000_000;

/// Each retry of an `unknown` check multiplies the rlimit by this.
pub const ESCALATION: u32 = 10;

/// How many times a spurious model of the linear abstraction is refined away
/// before the query is `unknown`.
pub const REFINEMENT_ROUNDS: u32 = 16;

/// Cap on the product lemmas derived from equality facts per query.
const MAX_HINTS: usize = 64;

/// The resource budget of every check: rlimits `start`, `start·10`, …,
/// `ceiling`, tried in turn while Z3 answers `unknown`. `0` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    /// The first attempt's rlimit.
    pub start: u32,
    /// The last attempt's rlimit.
    pub ceiling: u32,
}

impl Budget {
    /// [`DEFAULT_RLIMIT`] escalated up to [`MAX_RLIMIT`].
    pub const DEFAULT: Budget = Budget {
        start: DEFAULT_RLIMIT,
        ceiling: MAX_RLIMIT,
    };

    /// One attempt at exactly `rlimit`, no escalation.
    pub fn fixed(rlimit: u32) -> Budget {
        Budget {
            start: rlimit,
            ceiling: rlimit,
        }
    }

    /// The rlimits tried in turn.
    pub fn ladder(&self) -> Vec<u32> {
        let mut out = vec![self.start];
        let mut r = self.start;
        while r != 0 && r < self.ceiling {
            r = r.saturating_mul(ESCALATION).min(self.ceiling);
            out.push(r);
        }
        out
    }
}

impl fmt::Display for Budget {
    /// `Z3 rlimit 100000, escalated ×10 up to 10000000` or `Z3 rlimit 1000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == 0 {
            return f.write_str("no Z3 rlimit");
        }
        write!(f, "Z3 rlimit {}", self.start)?;
        if self.ceiling > self.start {
            write!(f, ", escalated ×{ESCALATION} up to {}", self.ceiling)?;
        }
        Ok(())
    }
}

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
    /// Queries that reached Z3.
    pub z3_checks: u64,
    /// Of which came back `unknown`.
    pub unknowns: u64,
    /// Retries of an `unknown` check at a larger rlimit.
    pub escalations: u64,
    /// Queries with products, answered through the linear abstraction.
    pub abstracted: u64,
    /// Refinement rounds (spurious models of the abstraction excluded).
    pub refinements: u64,
    /// Answered by interval reasoning or a witness before Z3 (`fast.rs`).
    pub fast: u64,
    /// Answered from the persistent proof cache (`disk.rs`).
    pub disk_hits: u64,
    /// Queries answered from the proof cache, run again on the solver
    /// before a later query of their scope missed.
    pub replays: u64,
}

impl Stats {
    /// Add `o`'s counts (a query run on the Z3 worker counts on the thread
    /// that asked it).
    fn absorb(&mut self, o: &Stats) {
        let Stats {
            queries,
            syntactic,
            cache_hits,
            z3_checks,
            unknowns,
            escalations,
            abstracted,
            refinements,
            fast,
            disk_hits,
            replays,
        } = *o;
        self.queries += queries;
        self.syntactic += syntactic;
        self.cache_hits += cache_hits;
        self.z3_checks += z3_checks;
        self.unknowns += unknowns;
        self.escalations += escalations;
        self.abstracted += abstracted;
        self.refinements += refinements;
        self.fast += fast;
        self.disk_hits += disk_hits;
        self.replays += replays;
    }
}

struct State {
    budget: Budget,
    cache_enabled: bool,
    fast_enabled: bool,
    cache: HashMap<String, Answer>,
    stats: Stats,
    /// The persistent proof cache of this thread's scoped checks, if any.
    disk: Option<std::rc::Rc<disk::Store>>,
}

#[derive(Clone)]
enum Answer {
    Ent(Entailment),
    Sat(Satisfiability),
}

impl State {
    fn new() -> State {
        let start = crate::env::TC_SOLVER_RLIMIT
            .parse::<u32>()
            .unwrap_or(DEFAULT_RLIMIT);
        let ceiling = crate::env::TC_SOLVER_MAX_RLIMIT
            .parse::<u32>()
            .unwrap_or(MAX_RLIMIT.max(start));
        State {
            budget: Budget { start, ceiling },
            cache_enabled: true,
            // `TC_SOLVER_FAST=off` sends every non-syntactic query to Z3
            // (to measure Z3's share, and the proof cache, on any crate).
            fast_enabled: crate::env::TC_SOLVER_FAST
                .get()
                .map_or(true, |v| v != "off"),
            cache: HashMap::new(),
            stats: Stats::default(),
            disk: None,
        }
    }
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

/// Give this thread's checks exactly `rlimit` each (Z3 `rlimit`; 0 =
/// unlimited), without escalation: [`Budget::fixed`]. Clears the cache, since
/// verdicts depend on the budget.
pub fn set_rlimit(rlimit: u32) {
    set_budget(Budget::fixed(rlimit))
}

/// Set this thread's budget (clears the cache).
pub fn set_budget(budget: Budget) {
    with_state(|s| {
        s.budget = budget;
        s.cache.clear();
    })
}

/// This thread's first-attempt rlimit.
pub fn rlimit() -> u32 {
    with_state(|s| s.budget.start)
}

/// This thread's budget.
pub fn budget() -> Budget {
    with_state(|s| s.budget)
}

/// What an `unknown` verdict exhausted, for the E0501 message.
pub fn budget_note() -> String {
    format!(
        "{} per check, {REFINEMENT_ROUNDS} refinement rounds for products",
        budget()
    )
}

/// Turn this thread's result cache on or off (off also clears it).
pub fn set_cache_enabled(on: bool) {
    with_state(|s| {
        s.cache_enabled = on;
        s.cache.clear();
    })
}

/// Keep the answers of this thread's scoped checks in `dir` (created on
/// the first write), or in no directory (`None`, the default). See
/// `solver/disk.rs` for what an entry is keyed by and how it is verified.
pub fn set_proof_cache(dir: Option<&std::path::Path>) {
    with_state(|s| s.disk = dir.map(|d| std::rc::Rc::new(disk::Store::new(d))))
}

/// Whether this thread has a proof cache directory.
pub fn has_proof_cache() -> bool {
    with_state(|s| s.disk.is_some())
}

/// This thread's proof cache directory, if any (caches of whole checked
/// functions live beside its entries).
pub fn proof_cache_dir() -> Option<std::path::PathBuf> {
    with_state(|s| s.disk.as_ref().map(|d| d.dir().to_path_buf()))
}

pub use disk::{stats as proof_cache_stats, DiskStats};

/// What the proof cache keys its entries by: tc-core's version and source
/// fingerprint and Z3's full version (a checker or solver that differs
/// answers anew). Other caches of checked results key by it too.
pub fn proof_cache_identity() -> &'static str {
    disk::identity()
}

/// Turn the answers before Z3 (`solver/fast.rs`) on or off for this
/// thread; off, every query that is not syntactic reaches Z3 (for tests that
/// exercise Z3's encoding, and for comparing the two). Clears the cache.
pub fn set_fast_path_enabled(on: bool) {
    with_state(|s| {
        s.fast_enabled = on;
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
    profile::time("solver.query", || entails_inner(ctx, extra, goal))
}

fn entails_inner(ctx: &Ctx, extra: &[Pred], goal: &Pred) -> Entailment {
    let facts = collect_facts(ctx, extra);
    let shown = relevant_vars(ctx, goal);
    with_state(|s| {
        s.stats.queries += 1;
        if *goal == Pred::True || facts.contains(goal) {
            s.stats.syntactic += 1;
            return Entailment::Valid;
        }
        if s.fast_enabled && profile::time("solver.fast", || fast::valid(&facts, goal)) {
            s.stats.fast += 1;
            return Entailment::Valid;
        }
        // The counterexample lists `shown` in this order: part of the query.
        let order = format!("ent[{}]", shown.join(","));
        let key = cache_key(&order, &facts, Some(goal), s.budget);
        if s.cache_enabled {
            if let Some(Answer::Ent(e)) = s.cache.get(&key) {
                s.stats.cache_hits += 1;
                return e.clone();
            }
        }
        let disk = s.disk.clone().filter(|_| s.cache_enabled);
        let q = Query::new(key.clone(), &facts, Some(goal), &shown, s.budget);
        let out = match run(q, disk.as_deref(), &mut s.stats) {
            Outcome::Unsat => Entailment::Valid,
            Outcome::Sat(Some(cex)) => Entailment::Invalid(cex),
            Outcome::Sat(None) | Outcome::Unknown => {
                s.stats.unknowns += 1;
                Entailment::Unknown
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
    profile::time("solver.query", || satisfiable_inner(ctx, extra))
}

fn satisfiable_inner(ctx: &Ctx, extra: &[Pred]) -> Satisfiability {
    let facts = collect_facts(ctx, extra);
    with_state(|s| {
        s.stats.queries += 1;
        if facts.contains(&Pred::False) {
            s.stats.syntactic += 1;
            return Satisfiability::Unsat;
        }
        if s.fast_enabled && profile::time("solver.fast", || fast::witness(&facts)) {
            s.stats.fast += 1;
            return Satisfiability::Sat;
        }
        let key = cache_key("sat", &facts, None, s.budget);
        if s.cache_enabled {
            if let Some(Answer::Sat(r)) = s.cache.get(&key) {
                s.stats.cache_hits += 1;
                return *r;
            }
        }
        let disk = s.disk.clone().filter(|_| s.cache_enabled);
        let q = Query::new(key.clone(), &facts, None, &[], s.budget);
        let out = match run(q, disk.as_deref(), &mut s.stats) {
            Outcome::Sat(_) => Satisfiability::Sat,
            Outcome::Unsat => Satisfiability::Unsat,
            Outcome::Unknown => {
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
/// [`run`] asserts the facts in this same order, so the cached answer is the
/// answer any asker would get.
fn cache_key(kind: &str, facts: &[Pred], goal: Option<&Pred>, budget: Budget) -> String {
    let fs: Vec<String> = canonical(facts).iter().map(|p| p.to_string()).collect();
    let g = goal.map(|g| g.to_string()).unwrap_or_default();
    let b = (budget.start, budget.ceiling);
    format!("{kind}|{b:?}|{}|{g}", fs.join(";"))
}

/// Facts sorted and de-duplicated by printed form.
fn canonical(facts: &[Pred]) -> Vec<Pred> {
    let mut keyed: Vec<(String, &Pred)> = facts.iter().map(|p| (p.to_string(), p)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    keyed.into_iter().map(|(_, p)| p.clone()).collect()
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

/// What one query found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// The facts (and the negated goal) have no model.
    Unsat,
    /// A real model; for an entailment, its minimal counterexample.
    Sat(Option<Counterexample>),
    /// Budget or refinement rounds exhausted.
    Unknown,
}

/// One query as the solver runs it: its canonical key (the cache's) and
/// what [`solve`] needs.
struct Query {
    key: String,
    facts: Vec<Pred>,
    goal: Option<Pred>,
    shown: Vec<String>,
    budget: Budget,
}

impl Query {
    fn new(
        key: String,
        facts: &[Pred],
        goal: Option<&Pred>,
        shown: &[String],
        budget: Budget,
    ) -> Query {
        Query {
            key,
            facts: canonical(facts),
            goal: goal.cloned(),
            shown: shown.to_vec(),
            budget,
        }
    }
}

/// The state of one [`scoped`] check.
struct Scope {
    /// Its Z3 context and solver, made at the first query that reaches Z3:
    /// a function whose every query is answered before Z3 (syntactically, by
    /// `fast`, or from the proof cache) never pays for them.
    z3: Option<Z3Scope>,
    /// The history of the solver so far, as the proof cache keys it.
    chain: u128,
    /// Queries answered from the proof cache that the solver has not run:
    /// replayed, in order, before the first query that has to run.
    pending: Vec<Query>,
    /// Its id on the Z3 worker ([`use_worker`]), and whether the worker
    /// holds a context for it.
    id: u64,
    remote: bool,
}

struct Z3Scope {
    ctx: z3::Context,
    solver: Option<Solver>,
    /// The rlimit last set on `solver`: setting parameters costs more than a
    /// small check, so it is done only when the rlimit changes.
    rlimit: Cell<Option<u32>>,
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
    /// Hands a context made by `with_z3_config` out of its closure.
    static MADE: RefCell<Option<z3::Context>> = const { RefCell::new(None) };
}

/// A new Z3 context, used by nothing yet. (`z3::Context::new` is private to
/// the z3 crate; `with_z3_config` makes one and installs it for its closure.)
fn fresh_context() -> z3::Context {
    z3::with_z3_config(&Config::new(), || {
        MADE.with(|m| *m.borrow_mut() = Some(z3::Context::thread_local()))
    });
    // `MADE` is always set above; the thread's context is only a fallback
    // that keeps this total.
    MADE.with(|m| m.borrow_mut().take())
        .unwrap_or_else(z3::Context::thread_local)
}

/// A solver of the thread's current context for linear integer arithmetic,
/// with `rlimit` set. `smt.logic` is set before the solver is first used:
/// otherwise Z3 builds its default tactic, with a strategy for every logic,
/// which costs several times a whole small check (issue #48's profile), and
/// parameters set after first use are validated against all of them.
fn lia_solver(rlimit: u32) -> Solver {
    let s = Solver::new();
    let mut p = rlimit_params(rlimit);
    p.set_symbol("smt.logic", "QF_LIA");
    s.set_params(&p);
    s
}

/// Run `f` — the check of one function — with a Z3 context of its own, shared
/// by its queries through push/pop (a fresh context costs milliseconds,
/// push/pop ~0.1 ms), made at its first query that reaches Z3. What `f` is
/// told then depends on `f`'s own queries and nothing else: not on earlier
/// checks on this thread, nor on the thread. The result cache is cleared on
/// entry and exit, since answers given inside the scope depend on the
/// scope's history. Nested calls join the outer scope.
pub fn scoped<R: Send + Sync>(f: impl FnOnce() -> R + Send + Sync) -> R {
    if SCOPE.with(|s| s.borrow().is_some()) {
        return f();
    }
    /// Leaves the scope even when `f` unwinds.
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            let scope = SCOPE.with(|s| s.borrow_mut().take());
            if let Some(Scope {
                id, remote: true, ..
            }) = scope
            {
                worker::end(id);
            }
            profile::time("z3.context_drop", || drop(scope));
            with_state(|s| s.cache.clear());
        }
    }
    with_state(|s| s.cache.clear());
    SCOPE.with(|s| {
        *s.borrow_mut() = Some(Scope {
            z3: None,
            chain: disk::chain_start(),
            pending: Vec::new(),
            id: worker::scope_id(),
            remote: false,
        })
    });
    let _leave = Leave;
    f()
}

/// One query: on the scope's solver between push and pop (or from the
/// proof cache), or outside any scope in a fresh Z3 context, so nothing
/// from an earlier query reaches it.
fn run(q: Query, store: Option<&disk::Store>, stats: &mut Stats) -> Outcome {
    let chained = SCOPE.with(|sc| {
        let mut sc = sc.borrow_mut();
        let scope = sc.as_mut()?;
        let prev = scope.chain;
        scope.chain = disk::chain_next(prev, &q.key);
        Some((prev, scope.chain))
    });
    let Some((prev, chain)) = chained else {
        stats.z3_checks += 1;
        return z3::with_z3_config(&Config::new(), || {
            let on = (
                &lia_solver(q.budget.start),
                &Cell::new(Some(q.budget.start)),
            );
            solve(on, &q.facts, q.goal.as_ref(), &q.shown, q.budget, stats)
        });
    };
    if let Some(out) =
        store.and_then(|st| profile::time("disk.load", || st.load(prev, chain, &q.key)))
    {
        stats.disk_hits += 1;
        SCOPE.with(|sc| {
            if let Some(scope) = sc.borrow_mut().as_mut() {
                scope.pending.push(q);
            }
        });
        return out;
    }
    // The solver must have run every earlier query of the scope, as it
    // would have cold, before this one.
    let key = q.key.clone();
    let out = if worker::enabled() {
        on_worker(q, stats)
    } else {
        on_this_thread(&q, stats)
    };
    if let Some(st) = store {
        profile::time("disk.save", || st.save(prev, chain, &key, &out));
    }
    out
}

/// The scope's Z3 work for `q` on this thread.
fn on_this_thread(q: &Query, stats: &mut Stats) -> Outcome {
    let taken = SCOPE.with(|sc| {
        let mut sc = sc.borrow_mut();
        let scope = sc.as_mut()?;
        let z = scope.z3.take().unwrap_or_else(new_z3_scope);
        Some((z, std::mem::take(&mut scope.pending)))
    });
    let Some((z, pending)) = taken else {
        return Outcome::Unknown;
    };
    let (z, out) = on_z3_scope(z, &pending, q, stats);
    SCOPE.with(|sc| {
        if let Some(scope) = sc.borrow_mut().as_mut() {
            scope.z3 = z;
        }
    });
    out
}

/// The scope's Z3 work for `q` on the worker thread ([`use_worker`]).
fn on_worker(q: Query, stats: &mut Stats) -> Outcome {
    let scope = SCOPE.with(|sc| {
        let mut sc = sc.borrow_mut();
        let scope = sc.as_mut()?;
        scope.remote = true;
        Some((scope.id, std::mem::take(&mut scope.pending)))
    });
    let Some((id, pending)) = scope else {
        return Outcome::Unknown;
    };
    let Some(r) = worker::run(id, pending, q) else {
        return Outcome::Unknown;
    };
    stats.absorb(&r.stats);
    profile::merge(r.phases);
    r.out
}

/// A scope's context, its solver made at its first query.
fn new_z3_scope() -> Z3Scope {
    Z3Scope {
        ctx: profile::time("z3.context_new", fresh_context),
        solver: None,
        rlimit: Cell::new(None),
    }
}

thread_local! {
    /// The scope [`on_z3_scope`] works on: `with_z3_context`'s closure
    /// must be `Send`, which Z3's handles are not, so it finds them here.
    static ACTIVE: RefCell<Option<Z3Scope>> = const { RefCell::new(None) };
}

/// `pending` replayed, then `q`, on the scope's solver; the scope is
/// handed back (`None` only if its solver's calls unwound).
fn on_z3_scope(
    z: Z3Scope,
    pending: &[Query],
    q: &Query,
    stats: &mut Stats,
) -> (Option<Z3Scope>, Outcome) {
    let ctx = z.ctx.clone();
    ACTIVE.with(|a| *a.borrow_mut() = Some(z));
    let out = z3::with_z3_context(&ctx, || {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            let z = a.as_mut()?;
            for p in pending {
                stats.replays += 1;
                let _ = on_scope_solver(z, p, stats);
            }
            stats.z3_checks += 1;
            Some(on_scope_solver(z, q, stats))
        })
    });
    (
        ACTIVE.with(|a| a.borrow_mut().take()),
        out.unwrap_or(Outcome::Unknown),
    )
}

/// Run the scoped checks' Z3 work on one long-lived thread of this
/// process from now on, with a fresh context always made ahead (`solver/worker.rs` says why):
/// for a process that checks functions as they come, such as the macro.
/// Verdicts and counterexamples are the same as on the checking thread.
pub fn use_worker() {
    worker::start();
}

/// Whether this process's scoped Z3 work runs on the worker
/// ([`use_worker`] was called and its thread started).
pub fn uses_worker() -> bool {
    worker::enabled()
}

/// Run `q` on the scope's solver, between push and pop.
fn on_scope_solver(z: &mut Z3Scope, q: &Query, stats: &mut Stats) -> Outcome {
    let rlimit = &z.rlimit;
    let solver = z.solver.get_or_insert_with(|| {
        rlimit.set(Some(q.budget.start));
        profile::time("z3.solver_new", || lia_solver(q.budget.start))
    });
    let on = (&*solver, &z.rlimit);
    profile::time("z3.push", || on.0.push());
    let out = solve(on, &q.facts, q.goal.as_ref(), &q.shown, q.budget, stats);
    profile::time("z3.pop", || solver.pop(1));
    out
}

/// Rewrite the variables the facts equate (`N == H`: a local `dim` binding,
/// a `requires`) to one representative (the least name) in every other
/// fact and in the goal. Sound: equals for equals. It matters inside `%`
/// and `/`, whose quotient and remainder the linearisation introduces per
/// syntactic atom: `D % N` and `D % H` are unrelated atoms unless `N` is
/// replaced. The equalities themselves stay, so every variable keeps its
/// value in a counterexample.
fn unalias(facts: &[Pred], goal: Option<&Pred>) -> (Vec<Pred>, Option<Pred>) {
    let mut rep: BTreeMap<String, String> = BTreeMap::new();
    fn find(rep: &BTreeMap<String, String>, v: &str) -> String {
        let mut v = v.to_string();
        while let Some(r) = rep.get(&v) {
            v = r.clone();
        }
        v
    }
    fn is_alias(p: &Pred) -> Option<(&str, &str)> {
        match p {
            Pred::Cmp(a, CmpOp::Eq, b) => a.as_var().zip(b.as_var()).filter(|(x, y)| x != y),
            _ => None,
        }
    }
    for p in facts {
        if let Some((a, b)) = is_alias(p) {
            let (ra, rb) = (find(&rep, a), find(&rep, b));
            if ra != rb {
                let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
                rep.insert(hi, lo);
            }
        }
    }
    if rep.is_empty() {
        return (facts.to_vec(), goal.cloned());
    }
    let map: BTreeMap<String, Dim> = rep
        .keys()
        .map(|v| (v.clone(), Dim::var(&find(&rep, v))))
        .collect();
    let facts = facts
        .iter()
        .map(|p| {
            if is_alias(p).is_some() {
                p.clone()
            } else {
                p.subst(&map)
            }
        })
        .collect();
    (facts, goal.map(|g| g.subst(&map)))
}

fn solve(
    (solver, rlimit): (&Solver, &Cell<Option<u32>>),
    facts: &[Pred],
    goal: Option<&Pred>,
    shown: &[String],
    budget: Budget,
    stats: &mut Stats,
) -> Outcome {
    let t_lower = std::time::Instant::now();
    let (facts, goal) = unalias(facts, goal);
    let goal = goal.as_ref();
    let mut lin = Linearizer::default();
    let mut preds: Vec<Pred> = facts.iter().map(|p| lin.lower_pred(p)).collect();
    let goal = goal.map(|g| lin.lower_pred(g));
    preds.extend(std::mem::take(&mut lin.side));
    if let Some(g) = &goal {
        let hints = hints(&preds, g);
        preds.extend(hints);
        preds.push(Pred::not(g.clone()));
    }
    // Hints are products of lowered dims: they add no new quotient.
    preds.extend(std::mem::take(&mut lin.side));
    let mut asserts: Vec<Bool> = preds.iter().map(|p| lin.pred(p)).collect();
    if !lin.products.is_empty() {
        stats.abstracted += 1;
        asserts.extend(lin.static_lemmas());
    }
    for a in &asserts {
        solver.assert(a);
    }
    profile::add("solve.encode", t_lower.elapsed());
    let mut lemmas = Vec::new();
    let found = profile::time("solve.check", || {
        refine(solver, rlimit, &lin, budget, stats, &mut lemmas)
    });
    let model = match found {
        Found::Unsat => return Outcome::Unsat,
        Found::Unknown => return Outcome::Unknown,
        Found::Model(m) => m,
    };
    if goal.is_none() {
        return Outcome::Sat(None);
    }
    let vars: Vec<Int> = shown.iter().map(|v| lin.var(v)).collect();
    // The check's model is a real counterexample; the minimum is preferred.
    let Some(fallback) = values(&model, shown, &vars) else {
        return Outcome::Unknown;
    };
    asserts.extend(lemmas);
    let opt = Minimiser {
        asserts: RefCell::new(asserts),
        vars: &vars,
        rlimit: Cell::new(0),
        model: RefCell::new(None),
    };
    let fresh = Cell::new(None);
    // Minimisation runs at the ceiling at once: every descent step is a
    // fresh query, and retrying each at growing rlimits would only add cost.
    let top = Budget::fixed(budget.ceiling);
    let found = profile::time("solve.minimise", || {
        refine(&opt, &fresh, &lin, top, stats, &mut Vec::new())
    });
    let cex = match found {
        Found::Model(m) => values(&m, shown, &vars).unwrap_or(fallback),
        Found::Unknown | Found::Unsat => fallback,
    };
    Outcome::Sat(Some(cex))
}

fn values(model: &Model, shown: &[String], vars: &[Int]) -> Option<Counterexample> {
    let mut out = Vec::new();
    for (name, v) in shown.iter().zip(vars) {
        out.push((name.clone(), model.eval(v, true)?.as_i64()?));
    }
    Some(Counterexample(out))
}

/// A Z3 engine that refinement drives: a solver or an optimiser.
trait Engine {
    fn add(&self, b: &Bool);
    fn set_rlimit(&self, rlimit: u32);
    fn check_now(&self) -> SatResult;
    fn model(&self) -> Option<Model>;
}

fn rlimit_params(rlimit: u32) -> Params {
    let mut p = Params::new();
    p.set_u32("rlimit", rlimit);
    p
}

impl Engine for Solver {
    fn add(&self, b: &Bool) {
        self.assert(b);
    }
    fn set_rlimit(&self, rlimit: u32) {
        self.set_params(&rlimit_params(rlimit));
    }
    fn check_now(&self) -> SatResult {
        self.check()
    }
    fn model(&self) -> Option<Model> {
        self.get_model()
    }
}

/// Lexicographic minimisation over the user variables, by bounded search
/// with a plain `Solver` under the rlimit: each variable in turn is pushed
/// down (`v ≤ 0` first, then galloping below, then bisection between the
/// largest infeasible and the smallest feasible bound) and fixed at its
/// minimum before the next.
///
/// Why not `z3::Optimize`: Z3 4.8's optimiser crashed (SIGSEGV in
/// `Z3_optimize_check`) when an rlimit ran out mid-search, and a crash here
/// crashes rustc. Every query below is an ordinary `check` that answers
/// `unknown` when the budget runs out, and an `unknown` only stops the
/// descent at the best value found so far (always a real model).
struct Minimiser<'a> {
    asserts: RefCell<Vec<Bool>>,
    vars: &'a [Int],
    rlimit: Cell<u32>,
    model: RefCell<Option<Model>>,
}

/// Bound on the checks one variable's descent makes: 63 galloping steps
/// reach −2^62, 63 bisection steps close any i64 interval.
const DESCENT_STEPS: u32 = 128;

impl Minimiser<'_> {
    /// `Some(model)` when the solver's assertions plus `v ≤ bound` are sat.
    fn below(solver: &Solver, v: &Int, bound: i64) -> Option<Model> {
        solver.push();
        solver.assert(&v.le(&Int::from_i64(bound)));
        let m = match solver.check() {
            SatResult::Sat => solver.get_model(),
            SatResult::Unsat | SatResult::Unknown => None,
        };
        solver.pop(1);
        m
    }

    /// The least value of `v` (best effort within the budget), starting
    /// from `model`, whose value of `v` is feasible.
    fn descend(solver: &Solver, v: &Int, mut model: Model) -> Model {
        let value = |m: &Model| m.eval(v, true).and_then(|x| x.as_i64());
        let Some(mut hi) = value(&model) else {
            return model;
        };
        // The largest bound known infeasible (None: none found yet).
        let mut lo: Option<i64> = None;
        let mut step: i64 = 1;
        let mut probe = hi.min(0);
        for _ in 0..DESCENT_STEPS {
            if lo.is_some_and(|l| l.saturating_add(1) >= hi) {
                break;
            }
            let bound = match lo {
                // In i128: `hi − l` can exceed i64 (the midpoint cannot).
                Some(l) => ((l as i128 + hi as i128) / 2) as i64,
                None if probe < hi => probe,
                None => hi - step,
            };
            match Self::below(solver, v, bound) {
                Some(m) => match value(&m) {
                    Some(x) if x <= bound => {
                        hi = x;
                        model = m;
                        if lo.is_none() {
                            step = step.saturating_mul(2);
                            probe = hi.saturating_sub(step);
                        }
                    }
                    _ => break,
                },
                None => lo = Some(bound),
            }
        }
        solver.assert(&v.eq(Int::from_i64(hi)));
        model
    }
}

impl Engine for Minimiser<'_> {
    fn add(&self, b: &Bool) {
        self.asserts.borrow_mut().push(b.clone());
    }
    fn set_rlimit(&self, rlimit: u32) {
        self.rlimit.set(rlimit);
    }
    fn check_now(&self) -> SatResult {
        let solver = lia_solver(self.rlimit.get());
        for a in self.asserts.borrow().iter() {
            solver.assert(a);
        }
        let r = solver.check();
        let mut model = match (r, solver.get_model()) {
            (SatResult::Sat, Some(m)) => m,
            _ => {
                *self.model.borrow_mut() = None;
                return r;
            }
        };
        for v in self.vars {
            model = Self::descend(&solver, v, model);
        }
        *self.model.borrow_mut() = Some(model);
        SatResult::Sat
    }
    fn model(&self) -> Option<Model> {
        self.model.borrow_mut().take()
    }
}

/// Escalate: the ladder's rlimits in turn while the answer is `unknown`.
/// `current` is the rlimit the engine already has.
fn check_escalating(
    e: &impl Engine,
    current: &Cell<Option<u32>>,
    budget: Budget,
    stats: &mut Stats,
) -> SatResult {
    for (i, rlimit) in budget.ladder().into_iter().enumerate() {
        if i > 0 {
            stats.escalations += 1;
        }
        if current.get() != Some(rlimit) {
            profile::time("z3.set_params", || e.set_rlimit(rlimit));
            current.set(Some(rlimit));
        }
        let r = e.check_now();
        if r != SatResult::Unknown {
            return r;
        }
    }
    SatResult::Unknown
}

enum Found {
    Unsat,
    /// A model consistent with every product: a real model.
    Model(Model),
    Unknown,
}

/// Check, and exclude spurious models of the abstraction until a real one is
/// found, the abstraction is unsat, or the rounds run out.
fn refine(
    e: &impl Engine,
    current: &Cell<Option<u32>>,
    lin: &Linearizer,
    budget: Budget,
    stats: &mut Stats,
    lemmas: &mut Vec<Bool>,
) -> Found {
    for _ in 0..=REFINEMENT_ROUNDS {
        match check_escalating(e, current, budget, stats) {
            SatResult::Unsat => return Found::Unsat,
            SatResult::Unknown => return Found::Unknown,
            SatResult::Sat => {}
        }
        let Some(model) = e.model() else {
            return Found::Unknown;
        };
        match lin.refute(&model) {
            None => return Found::Unknown,
            Some(new) if new.is_empty() => return Found::Model(model),
            Some(new) => {
                stats.refinements += 1;
                for l in new {
                    e.add(&l);
                    lemmas.push(l);
                }
            }
        }
    }
    Found::Unknown
}

/// For an entailment: each equality fact `p = 0` times each cofactor `u` that
/// turns a monomial of `p` into a product of the goal (`u·p = 0` holds
/// whenever `p = 0` does, so these are sound). A second round targets the
/// products the first introduced, so `D % 8 == 0` reaches `B·S·(D % 8)`.
fn hints(facts: &[Pred], goal: &Pred) -> Vec<Pred> {
    let mut targets: BTreeSet<Vec<Atom>> = products_of(goal.dims());
    let mut seen = targets.clone();
    let mut out: Vec<Pred> = Vec::new();
    for _round in 0..2 {
        let mut next = BTreeSet::new();
        for f in facts {
            let Pred::Cmp(a, CmpOp::Eq, b) = f else {
                continue;
            };
            let p = a.clone() - b.clone();
            for (t, _) in p.terms() {
                for g in &targets {
                    let Some(u) = cofactor(g, t) else { continue };
                    let h = p.clone() * monomial_dim(&u);
                    let hp = Pred::eq(h.clone(), 0);
                    if out.len() < MAX_HINTS && !out.contains(&hp) {
                        next.extend(
                            products_of(vec![&h])
                                .into_iter()
                                .filter(|m| !seen.contains(m)),
                        );
                        out.push(hp);
                    }
                }
            }
        }
        seen.extend(next.iter().cloned());
        targets = next;
    }
    out
}

/// The monomials of degree ≥ 2 of some dims.
fn products_of(dims: Vec<&Dim>) -> BTreeSet<Vec<Atom>> {
    dims.into_iter()
        .flat_map(|d| d.terms().map(|(m, _)| m.to_vec()).collect::<Vec<_>>())
        .filter(|m| m.len() >= 2)
        .collect()
}

/// `g / t` as a non-empty monomial, when `t` (non-empty) divides `g`.
fn cofactor(g: &[Atom], t: &[Atom]) -> Option<Vec<Atom>> {
    if t.is_empty() || t.len() >= g.len() {
        return None;
    }
    let mut rest = g.to_vec();
    for a in t {
        let i = rest.iter().position(|x| x == a)?;
        rest.remove(i);
    }
    Some(rest)
}

fn monomial_dim(m: &[Atom]) -> Dim {
    let mut out = Dim::c(1);
    for a in m {
        out = out
            * match a {
                Atom::Var(v) => Dim::var(v.clone()),
                Atom::Div(x, y) => x.div(y),
                Atom::Mod(x, y) => x.rem(y),
            };
    }
    out
}

/// `m = x · y`, abstracted as the fresh integer `m`.
struct Product {
    m: Int,
    x: Int,
    y: Int,
}

/// Lowers dims to Presburger terms over fresh product variables.
#[derive(Default)]
struct Linearizer {
    vars: HashMap<String, Int>,
    /// Product variable of each monomial of degree ≥ 2.
    monos: HashMap<Vec<Atom>, Int>,
    products: Vec<Product>,
    /// Quotient variable of each division by a non-constant (Section 2 §13).
    quotients: BTreeMap<(Dim, Dim), String>,
    /// Definitional constraints of those quotients, and `x = k·(x / k) + x % k`
    /// for each division by a positive constant, not yet encoded.
    side: Vec<Pred>,
}

impl Linearizer {
    fn var(&mut self, name: &str) -> Int {
        self.vars
            .entry(name.to_string())
            .or_insert_with(|| Int::new_const(name))
            .clone()
    }

    /// Replace every division by a non-constant with its quotient variable.
    fn lower_dim(&mut self, d: &Dim) -> Dim {
        let mut out = Dim::c(0);
        for (m, c) in d.terms() {
            let mut t = Dim::c(c);
            for a in m {
                t = t * self.lower_atom(a);
            }
            out = out + t;
        }
        out
    }

    fn lower_atom(&mut self, a: &Atom) -> Dim {
        let (x, y, is_div) = match a {
            Atom::Var(v) => return Dim::var(v.clone()),
            Atom::Div(x, y) => (x, y, true),
            Atom::Mod(x, y) => (x, y, false),
        };
        let (lx, ly) = (self.lower_dim(x), self.lower_dim(y));
        if let Some(k) = ly.as_const() {
            // Division by a constant stays in Presburger: Z3's native div/mod.
            // Its defining identity lets products of `x / k` meet products of x.
            let (q, r) = (lx.div(&ly), lx.rem(&ly));
            if k > 0 {
                let def = Pred::eq(lx.clone(), q.scale(k) + r.clone());
                if !self.side.contains(&def) {
                    self.side.push(def);
                }
            }
            return if is_div { q } else { r };
        }
        let q = Dim::var(self.quotient(&lx, &ly));
        if is_div {
            q
        } else {
            lx - ly * q
        }
    }

    /// §13: a fresh quotient q with x = y·q + r, 0 ≤ r < y whenever y ≥ 1.
    fn quotient(&mut self, x: &Dim, y: &Dim) -> String {
        let key = (x.clone(), y.clone());
        if let Some(q) = self.quotients.get(&key) {
            return q.clone();
        }
        let name = format!("({x}) div ({y})");
        let r = x.clone() - y.clone() * Dim::var(name.clone());
        self.side.push(Pred::or([
            Pred::lt(y.clone(), 1),
            Pred::and([Pred::ge(r.clone(), 0), Pred::lt(r, y.clone())]),
        ]));
        self.quotients.insert(key, name.clone());
        name
    }

    fn lower_pred(&mut self, p: &Pred) -> Pred {
        match p {
            Pred::True | Pred::False => p.clone(),
            Pred::Cmp(a, op, b) => Pred::Cmp(self.lower_dim(a), *op, self.lower_dim(b)),
            Pred::And(ps) => Pred::And(ps.iter().map(|q| self.lower_pred(q)).collect()),
            Pred::Or(ps) => Pred::Or(ps.iter().map(|q| self.lower_pred(q)).collect()),
            Pred::Not(q) => Pred::Not(Box::new(self.lower_pred(q))),
        }
    }

    /// A lowered dim as a linear term.
    fn dim(&mut self, d: &Dim) -> Int {
        let mut terms: Vec<Int> = Vec::new();
        for (m, c) in d.terms() {
            let t = self.mono(m);
            terms.push(if c == 1 {
                t
            } else {
                Int::mul(&[Int::from_i64(c), t])
            });
        }
        match terms.len() {
            0 => Int::from_i64(0),
            1 => terms.remove(0),
            _ => Int::add(&terms),
        }
    }

    fn mono(&mut self, m: &[Atom]) -> Int {
        match m {
            [] => Int::from_i64(1),
            [a] => self.atom(a),
            [init @ .., last] => {
                if let Some(t) = self.monos.get(m) {
                    return t.clone();
                }
                let x = self.mono(init);
                let y = self.atom(last);
                let t = Int::new_const(format!("m!{}", self.products.len()));
                self.products.push(Product { m: t.clone(), x, y });
                self.monos.insert(m.to_vec(), t.clone());
                t
            }
        }
    }

    fn atom(&mut self, a: &Atom) -> Int {
        match a {
            Atom::Var(v) => self.var(v),
            Atom::Div(x, y) => self.dim(x).div(self.dim(y)),
            Atom::Mod(x, y) => self.dim(x).modulo(self.dim(y)),
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

    /// Sign and monotonicity of every product: true of all integers.
    fn static_lemmas(&self) -> Vec<Bool> {
        let zero = Int::from_i64(0);
        let one = Int::from_i64(1);
        let mut out = Vec::new();
        for Product { m, x, y } in &self.products {
            let (xp, xn) = (x.ge(&zero), x.le(&zero));
            let (yp, yn) = (y.ge(&zero), y.le(&zero));
            out.push(Bool::and(&[xp.clone(), yp.clone()]).implies(m.ge(&zero)));
            out.push(Bool::and(&[xn.clone(), yn.clone()]).implies(m.ge(&zero)));
            out.push(Bool::and(&[xp.clone(), yn]).implies(m.le(&zero)));
            out.push(Bool::and(&[xn, yp.clone()]).implies(m.le(&zero)));
            out.push(Bool::and(&[x.ge(&one), yp]).implies(m.ge(y)));
            out.push(Bool::and(&[y.ge(&one), xp]).implies(m.ge(x)));
        }
        out
    }

    /// The tangent lemmas excluding `model`'s spurious products: empty when
    /// the model is real, `None` when a value is out of range.
    fn refute(&self, model: &Model) -> Option<Vec<Bool>> {
        let val = |t: &Int| model.eval(t, true).and_then(|v| v.as_i64());
        let mut out = Vec::new();
        for Product { m, x, y } in &self.products {
            let (a, b, c) = (val(x)?, val(y)?, val(m)?);
            let ab = a.checked_mul(b)?;
            if ab == c {
                continue;
            }
            // (x − a)(y − b) ≥ 0  ⇔  m ≥ b·x + a·y − a·b, and ≤ in the other quadrants.
            let (ka, kb) = (Int::from_i64(a), Int::from_i64(b));
            let plane = Int::sub(&[
                Int::add(&[
                    Int::mul(&[kb.clone(), x.clone()]),
                    Int::mul(&[ka.clone(), y.clone()]),
                ]),
                Int::from_i64(ab),
            ]);
            let same = Bool::or(&[
                Bool::and(&[x.ge(&ka), y.ge(&kb)]),
                Bool::and(&[x.le(&ka), y.le(&kb)]),
            ]);
            let cross = Bool::or(&[
                Bool::and(&[x.ge(&ka), y.le(&kb)]),
                Bool::and(&[x.le(&ka), y.ge(&kb)]),
            ]);
            out.push(same.implies(m.ge(&plane)));
            out.push(cross.implies(m.le(&plane)));
        }
        Some(out)
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
        // Beyond the witness of `fast` (B = 1), so Z3 answers and the cache
        // keeps the answer.
        let mut g2 = ctx(&["B"]);
        g2.assume(Pred::eq(Dim::var("B").rem(&Dim::c(4)), 0));
        assert_eq!(satisfiable(&g2, &[]), Satisfiability::Sat);
        let before = stats();
        assert_eq!(satisfiable(&g2, &[]), Satisfiability::Sat);
        let after = stats();
        assert_eq!(after.cache_hits, before.cache_hits + 1);
        assert_eq!(after.z3_checks, before.z3_checks);
    }

    #[test]
    fn proof_cache_replays_the_scope_before_a_miss() {
        let dir =
            std::env::temp_dir().join(format!("tc-proof-cache-replay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        set_fast_path_enabled(false);
        let g = ctx(&["B", "S"]);
        let (q1, q2, q3) = (
            Pred::ge(Dim::var("B") + Dim::var("S"), 2),
            Pred::ge("B", 3),
            Pred::eq("B", "S"),
        );
        let two = |a: &Pred, b: &Pred| scoped(|| (entails(&g, a), entails(&g, b)));
        // Cold answers, no cache.
        let cold = two(&q1, &q3);
        set_proof_cache(Some(&dir));
        reset();
        let _ = two(&q1, &q2);
        assert_eq!(stats().disk_hits, 0);
        // q1 comes from disk; q3 misses, so q1 is replayed on the solver first.
        reset();
        assert_eq!(two(&q1, &q3), cold);
        let s = stats();
        assert_eq!((s.disk_hits, s.replays, s.z3_checks), (1, 1, 1), "{s:?}");
        // Now both are on disk: no Z3 at all.
        reset();
        assert_eq!(two(&q1, &q3), cold);
        assert_eq!((stats().disk_hits, stats().z3_checks), (2, 0));
        set_proof_cache(None);
        set_fast_path_enabled(true);
        let _ = std::fs::remove_dir_all(&dir);
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
