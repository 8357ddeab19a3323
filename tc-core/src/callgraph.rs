//! The call graph of a module's tensor fns: Section 2 §17 types a call by the
//! callee's signature and has no recursion, so a cycle of calls
//! (`f → g → f`, or `f → f`) is an error at the call that closes it.
//!
//! The interpreter and the JIT inline or call callees with no depth bound of
//! their own that the type system could justify; refusing cycles here keeps
//! every accepted module finite. Everything is iterative (breadth-first
//! search), so a long chain of calls cannot exhaust the stack.

use std::collections::{BTreeMap, VecDeque};

use crate::diag::{Diagnostic, Label, SpanId};
use crate::ir::{Function, Op};

pub use crate::diag::codes::RECURSION;

/// The rule a recursive call breaks.
pub const R_RECURSION: &str = "call (Section 2 §17: no recursion)";

/// Calls of `f` to functions of the module: (callee index, span of the callee
/// name or of the call).
fn edges(f: &Function, index: &BTreeMap<&str, usize>) -> Vec<(usize, SpanId)> {
    f.body
        .iter()
        .filter_map(|inst| match &inst.op {
            Op::Call(name, _) => index.get(name.as_str()).map(|&j| (j, inst.attr_span(0))),
            _ => None,
        })
        .collect()
}

/// The shortest path of calls from `from` back to `to` (inclusive of both
/// ends), if any.
fn path_back(graph: &[Vec<(usize, SpanId)>], from: usize, to: usize) -> Option<Vec<usize>> {
    let mut parent: Vec<Option<usize>> = vec![None; graph.len()];
    let mut seen = vec![false; graph.len()];
    let mut queue = VecDeque::from([from]);
    seen[from] = true;
    while let Some(n) = queue.pop_front() {
        if n == to {
            let mut path = vec![n];
            let mut cur = n;
            while let Some(p) = parent[cur] {
                path.push(p);
                cur = p;
            }
            path.reverse();
            return Some(path);
        }
        for &(m, _) in &graph[n] {
            if !seen[m] {
                seen[m] = true;
                parent[m] = Some(n);
                queue.push_back(m);
            }
        }
    }
    None
}

/// One diagnostic per function that lies on a cycle of calls, at its first
/// call that starts a shortest cycle back to it, naming the cycle
/// (`f → g → f`). Returns `(index of the calling function in funcs,
/// diagnostic)` in the order of `funcs`. Calls to names that are not in
/// `funcs` are ignored (built-in ops, or errors reported elsewhere); when two
/// functions share a name, the first one is the callee.
pub fn recursion(funcs: &[&Function]) -> Vec<(usize, Diagnostic)> {
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, f) in funcs.iter().enumerate() {
        index.entry(f.sig.name.as_str()).or_insert(i);
    }
    let graph: Vec<Vec<(usize, SpanId)>> = funcs.iter().map(|f| edges(f, &index)).collect();
    let mut out = Vec::new();
    for (i, calls) in graph.iter().enumerate() {
        // The shortest cycle through `i`, over its calls in source order.
        let best = calls
            .iter()
            .filter_map(|&(j, span)| path_back(&graph, j, i).map(|p| (p, span)))
            .min_by_key(|(p, _)| p.len());
        let Some((back, span)) = best else { continue };
        let names: Vec<&str> = std::iter::once(i)
            .chain(back.iter().copied())
            .map(|k| funcs[k].sig.name.as_str())
            .collect();
        let cycle = names.join(" → ");
        let callee = names[1];
        let mut d = Diagnostic::new(
            RECURSION,
            R_RECURSION,
            span,
            format!("recursive call: `{cycle}`; tensor fns may not call themselves, directly or through other fns"),
        );
        d.labels.push(Label {
            span: funcs[index[callee]].sig.span,
            message: format!("`{callee}` is a tensor fn of this module (calls resolve to module fns before built-in ops)"),
        });
        d.help = Some(if back.len() == 1 {
            format!(
                "inside a `#[tensor_module]`, a tensor fn shadows a built-in op of the same name, so \
                 `{callee}(…)` in `fn {callee}` calls itself: rename the fn to use the built-in op"
            )
        } else {
            "shapes are checked against each callee's signature and a call graph must be acyclic: \
             unroll the recursion into separate fns"
                .to_string()
        });
        out.push((i, d));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::FnBuilder;
    use crate::{Dim, Dtype, TensorType, Type};

    /// `fn name(x: Tensor[f32; N]) -> Tensor[f32; N]` calling `callees` in order.
    fn func(name: &str, callees: &[&str]) -> Function {
        let t = Type::Tensor(TensorType::new(Dtype::F32, vec![Dim::var("N")]));
        let mut b = FnBuilder::new(name);
        let mut v = b.param("x", t.clone());
        for c in callees {
            v = b.op(Op::Call(c.to_string(), vec![v]));
        }
        b.returns(t);
        b.finish(v)
    }

    fn cycles(fs: &[Function]) -> Vec<(usize, String)> {
        let refs: Vec<&Function> = fs.iter().collect();
        recursion(&refs)
            .into_iter()
            .map(|(i, d)| (i, d.message))
            .collect()
    }

    #[test]
    fn acyclic_modules_pass() {
        let fs = [
            func("f", &["g", "h"]),
            func("g", &["h"]),
            func("h", &["relu"]),
        ];
        assert!(cycles(&fs).is_empty());
    }

    #[test]
    fn self_and_mutual_recursion_are_named() {
        let fs = [func("relu", &["relu"])];
        let c = cycles(&fs);
        assert_eq!(c.len(), 1);
        assert!(c[0].1.contains("`relu → relu`"), "{c:?}");
        let fs = [func("f", &["g"]), func("g", &["f"]), func("h", &["f"])];
        let c = cycles(&fs);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[0].1.contains("`f → g → f`"), "{c:?}");
        assert!(c[1].1.contains("`g → f → g`"), "{c:?}");
    }

    #[test]
    fn the_shortest_cycle_is_reported() {
        let fs = [func("a", &["b", "a"]), func("b", &["c"]), func("c", &["a"])];
        let c = cycles(&fs);
        assert!(c[0].1.contains("`a → a`"), "{c:?}");
        assert!(c[1].1.contains("`b → c → a → b`"), "{c:?}");
    }

    #[test]
    fn long_rings_do_not_recurse() {
        let n = 1500;
        let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
        let fs: Vec<Function> = (0..n)
            .map(|i| func(&names[i], &[names[(i + 1) % n].as_str()]))
            .collect();
        let c = cycles(&fs);
        assert_eq!(c.len(), n);
        assert!(
            c[0].1.starts_with("recursive call: `f0 → f1 → f2"),
            "{}",
            &c[0].1[..60]
        );
        assert!(c[0].1.contains("f1499 → f0`"));
    }
}
