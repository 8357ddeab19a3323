//! A function's shape: named values and parameters, basic blocks as
//! [`Block`] handles, branches (with [`LoopMd`] loop metadata), phis
//! (closed later where an arm comes from a loop's back edge: [`Phi`]),
//! and the function's and module's text. The checks here make a
//! malformed function a panic at the instruction that malforms it, or at
//! [`Builder::define_void`] for what only the whole function shows.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use super::{Builder, Ty, V};

/// The entry block's label.
const ENTRY: &str = "entry";

/// A basic block of the function being built, made by
/// [`Builder::new_block`] (or [`Builder::entry`]): its label is unique in
/// the function, and a branch or phi can name only such a handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    label: String,
}

impl fmt::Display for Block {
    /// `%label`, the block as an operand.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.label)
    }
}

/// Properties of a loop, attached to its latch's branch as `!llvm.loop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoopMd {
    unroll_count: u32,
}

impl LoopMd {
    /// Unroll the loop `n` times (`llvm.loop.unroll.count`: the pipeline
    /// unrolls only loops that ask).
    pub(crate) fn unroll_count(n: u32) -> LoopMd {
        assert!(n >= 1, "ir: unroll count {n}");
        LoopMd { unroll_count: n }
    }
}

/// A phi whose arms are not all known where it must be written (a loop
/// header's, before its back edge's values exist): its value is usable at
/// once, its remaining arms are given by [`Builder::phi_close`], which
/// [`Builder::define_void`] checks happened.
#[must_use = "a phi must be closed"]
#[derive(Debug)]
pub(crate) struct Phi {
    v: V,
    slot: usize,
}

impl Phi {
    /// The phi's value.
    pub(crate) fn value(&self) -> &V {
        &self.v
    }
}

/// The block instructions go to while it is tracked (made by a handle).
#[derive(Debug)]
struct Cur {
    label: String,
    /// Written to [`Builder::pre`] rather than the body.
    entry: bool,
    /// Its terminator is written.
    closed: bool,
    /// Only phis so far.
    head: bool,
}

/// One function's control-flow state (cleared by [`Builder::reset`]).
#[derive(Debug, Default)]
pub(super) struct FnState {
    /// `None` until the first block is entered.
    cur: Option<Cur>,
    entry_closed: bool,
    labels: HashSet<String>,
    placed: HashSet<String>,
    targets: BTreeSet<String>,
    names: HashSet<String>,
    next_name: Option<String>,
    params: Vec<String>,
    open_phis: usize,
    phi_slots: usize,
}

impl FnState {
    /// Panic unless the entry block can still take a hoisted value.
    pub(super) fn check_hoist(&self) {
        assert!(
            self.next_name.is_none(),
            "ir: a hoisted value cannot be named"
        );
        assert!(
            !self.entry_closed,
            "ir: a value hoisted after the entry block's terminator"
        );
    }

    /// Panic if the tracked current block is open: the next block would
    /// be entered by falling through, which LLVM has no form for.
    fn check_closed(&self, next: &str) {
        if let Some(c) = self.cur.as_ref().filter(|c| !c.closed) {
            panic!("ir: block `{}` falls through to `{next}`", c.label);
        }
    }
}

/// The placeholder of open phi `slot`'s remaining arms in the body.
fn phi_slot(slot: usize) -> String {
    format!("\u{1}phi{slot}\u{1}")
}

impl Builder {
    /// Name the next value defined `%name` instead of a fresh `%tN`
    /// (readable kernels); each name once per function.
    pub(crate) fn named(&mut self, name: impl fmt::Display) -> &mut Self {
        let name = format!("%{name}");
        self.claim(&name);
        let old = self.f.next_name.replace(name);
        assert!(old.is_none(), "ir: {old:?} names no value");
        self
    }

    /// Take `%name` for a value of this function: an identifier, not a
    /// fresh name's `%tN` spelling, not taken before.
    fn claim(&mut self, name: &str) {
        let id = &name[1..];
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
        let valid = id.chars().all(ok) && !id.starts_with(|c: char| c.is_ascii_digit());
        assert!(!id.is_empty() && valid, "ir: value name `{name}`");
        let fresh = id
            .strip_prefix('t')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()));
        assert!(!fresh, "ir: `{name}` is a fresh name");
        let new = self.f.names.insert(name.to_string());
        assert!(new, "ir: `{name}` defined twice");
    }

    /// The name of the value being defined.
    pub(super) fn next_name(&mut self) -> String {
        match self.f.next_name.take() {
            Some(n) => n,
            None => self.fresh(),
        }
    }

    /// Where the next instruction of the current block goes, after
    /// checking that it may go there (`phi`: it is a phi).
    pub(super) fn out(&mut self, phi: bool) -> &mut String {
        let entry = match &mut self.f.cur {
            None => false,
            Some(c) => {
                assert!(
                    !c.closed,
                    "ir: an instruction after the terminator of block `{}`",
                    c.label
                );
                if phi {
                    assert!(
                        c.head && !c.entry,
                        "ir: a phi not at the head of block `{}`",
                        c.label
                    );
                }
                c.head &= phi;
                c.entry
            }
        };
        if entry {
            &mut self.pre
        } else {
            &mut self.body
        }
    }

    /// Append one instruction that defines no value.
    pub(super) fn line(&mut self, text: &str) {
        if let Some(n) = &self.f.next_name {
            panic!("ir: `{text}` defines no value to name {n}");
        }
        let out = self.out(false);
        out.push_str("  ");
        out.push_str(text);
        out.push('\n');
    }

    /// `%name`, parameter of the function being built (`attrs` such as
    /// `noalias nocapture readonly` before its name), as an operand.
    pub(crate) fn param(&mut self, ty: Ty, name: &str, attrs: &str) -> V {
        let v = V::new(ty, format!("%{name}"));
        self.claim(&v.name);
        self.f.params.push(match attrs {
            "" => v.typed(),
            _ => format!("{ty} {attrs} {v}"),
        });
        v
    }

    // ---- blocks ------------------------------------------------------------

    /// The entry block, the function's first (its instructions go to
    /// [`Self::pre`] once it is the current block).
    pub(crate) fn entry(&self) -> Block {
        Block {
            label: ENTRY.into(),
        }
    }

    /// A new block labelled `name`, or `name.k` where that is taken.
    pub(crate) fn new_block(&mut self, name: &str) -> Block {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
        assert!(
            !name.is_empty() && name.chars().all(ok),
            "ir: label `{name}`"
        );
        let mut label = name.to_string();
        let mut k = 0;
        while label == ENTRY || !self.f.labels.insert(label.clone()) {
            k += 1;
            label = format!("{name}.{k}");
        }
        Block { label }
    }

    /// Make `b` the current block: its label, then the instructions that
    /// follow. The current block must be terminated; each block is placed
    /// once, the entry block first.
    pub(crate) fn switch_to(&mut self, b: &Block) {
        self.f.check_closed(&b.label);
        assert!(
            self.f.placed.insert(b.label.clone()),
            "ir: block `{}` placed twice",
            b.label
        );
        let entry = b.label == ENTRY;
        if entry {
            assert!(self.body.is_empty(), "ir: the entry block placed late");
        } else {
            self.body.push_str(&b.label);
            self.body.push_str(":\n");
        }
        self.f.cur = Some(Cur {
            label: b.label.clone(),
            entry,
            closed: false,
            head: true,
        });
    }

    // ---- terminators -------------------------------------------------------

    /// Write the terminator `text` to the current block, naming `targets`.
    fn terminate(&mut self, text: &str, targets: &[&Block]) {
        self.line(text);
        for t in targets {
            self.f.targets.insert(t.label.clone());
        }
        if let Some(c) = &mut self.f.cur {
            c.closed = true;
            self.f.entry_closed |= c.entry;
        }
    }

    /// `br label %to`.
    pub(crate) fn br(&mut self, to: &Block) {
        self.terminate(&format!("br label {to}"), &[to]);
    }

    /// `br` to `t` if the `i1` `c`, else to `f`.
    pub(crate) fn cond_br(&mut self, c: &V, t: &Block, f: &Block) {
        self.terminate(&Self::cond_br_text(c, t, f), &[t, f]);
    }

    /// [`Self::cond_br`] closing a loop (the latch's branch), with the
    /// loop's metadata.
    pub(crate) fn cond_br_loop(&mut self, c: &V, t: &Block, f: &Block, md: LoopMd) {
        let id = self.loop_md(md);
        let text = format!("{}, !llvm.loop !{id}", Self::cond_br_text(c, t, f));
        self.terminate(&text, &[t, f]);
    }

    fn cond_br_text(c: &V, t: &Block, f: &Block) -> String {
        assert!(c.ty == Ty::I1, "ir: `br` condition {} {}", c.ty, c.name);
        format!("br {}, label {t}, label {f}", c.typed())
    }

    /// `ret void`.
    pub(crate) fn ret_void(&mut self) {
        self.terminate("ret void", &[]);
    }

    // ---- phis --------------------------------------------------------------

    /// The arms `[ v, %label ]` of a phi of type `ty` (the first arm's
    /// where `None`), each checked.
    fn phi_arms(&mut self, ty: Option<Ty>, incoming: &[(V, Block)]) -> (Ty, String) {
        let ty = ty.unwrap_or_else(|| incoming.first().expect("ir: empty phi").0.ty);
        assert!(!incoming.is_empty(), "ir: a phi closed with no arm");
        let mut arms = Vec::new();
        for (v, l) in incoming {
            assert!(v.ty == ty, "ir: phi arm {} {} in a {ty} phi", v.ty, v.name);
            self.f.targets.insert(l.label.clone());
            arms.push(format!("[ {v}, {l} ]"));
        }
        (ty, arms.join(", "))
    }

    /// Define `rhs`, a phi of type `ty`.
    fn def_phi(&mut self, ty: Ty, rhs: String) -> V {
        assert!(!self.hoist, "ir: a hoisted phi");
        let v = V::new(ty, self.next_name());
        let out = self.out(true);
        out.push_str(&format!("  {v} = {rhs}\n"));
        v
    }

    /// A phi over `(value, predecessor)` pairs, all of one type.
    pub(crate) fn phi(&mut self, incoming: &[(V, Block)]) -> V {
        let (ty, arms) = self.phi_arms(None, incoming);
        self.def_phi(ty, format!("phi {ty} {arms}"))
    }

    /// A phi over `incoming` and the arms [`Self::phi_close`] adds.
    pub(crate) fn phi_open(&mut self, incoming: &[(V, Block)]) -> Phi {
        let (ty, arms) = self.phi_arms(None, incoming);
        let slot = self.f.phi_slots;
        self.f.phi_slots += 1;
        self.f.open_phis += 1;
        let v = self.def_phi(ty, format!("phi {ty} {arms}{}", phi_slot(slot)));
        Phi { v, slot }
    }

    /// Add the rest of `phi`'s arms, of its type.
    pub(crate) fn phi_close(&mut self, phi: Phi, incoming: &[(V, Block)]) {
        let (_, arms) = self.phi_arms(Some(phi.v.ty), incoming);
        let slot = phi_slot(phi.slot);
        let at = self
            .body
            .find(&slot)
            .expect("ir: an open phi is in the body");
        self.body
            .replace_range(at..at + slot.len(), &format!(", {arms}"));
        self.f.open_phis -= 1;
    }

    // ---- the function and the module ---------------------------------------

    /// The text of `define void @name(params) attrs { … }`, the function
    /// built since the last reset from its entry block (then reset).
    /// Panics unless it is whole: every block terminated, every branch
    /// target placed, every phi closed.
    pub(crate) fn define_void(&mut self, name: &str, attrs: &str) -> String {
        let f = &self.f;
        assert!(f.placed.contains(ENTRY), "ir: `@{name}` has no entry block");
        self.check_body();
        let f = &self.f;
        let text = format!(
            "define void @{name}({}) {attrs} {{\n{ENTRY}:\n{}{}}}\n\n",
            f.params.join(", "),
            self.pre,
            self.body
        );
        self.reset();
        text
    }

    /// Panic unless the blocks after the entry block are whole: the last
    /// one terminated, every branch target placed, every phi closed. For a
    /// function whose entry block its caller writes ([`Self::pre`], then a
    /// branch to the first block of [`Self::body`]); [`Self::define_void`]
    /// checks this too.
    pub(crate) fn check_body(&self) {
        let f = &self.f;
        f.check_closed("the end of the function");
        if let Some(t) = f.targets.iter().find(|t| !f.placed.contains(*t)) {
            panic!("ir: a branch or phi names block `{t}`, never placed");
        }
        assert!(f.open_phis == 0, "ir: {} phi(s) left open", f.open_phis);
    }

    /// Register the metadata of a loop: the id of its distinct node.
    fn loop_md(&mut self, md: LoopMd) -> usize {
        let id = self.meta.len();
        let count = id + 1;
        self.meta.push(format!("distinct !{{!{id}, !{count}}}"));
        self.meta.push(format!(
            "!{{!\"llvm.loop.unroll.count\", i32 {}}}",
            md.unroll_count
        ));
        id
    }

    /// A module of `functions` (texts of [`Self::define_void`]) with the
    /// declarations of what they call, the attribute groups `attributes`
    /// they name, and the metadata their loops registered.
    pub(crate) fn module_text(&self, functions: &str, attributes: &str) -> String {
        let mut s = String::new();
        for d in &self.decls {
            s.push_str(&d.declare());
            s.push('\n');
        }
        if !self.decls.is_empty() {
            s.push('\n');
        }
        s.push_str(functions);
        s.push_str(attributes);
        for (id, node) in self.meta.iter().enumerate() {
            s.push_str(&format!("!{id} = {node}\n"));
        }
        s
    }
}
