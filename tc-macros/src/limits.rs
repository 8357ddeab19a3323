//! Input-size limits checked on the raw token stream, before `syn` parses it.
//!
//! rustc runs a proc macro on its main thread (8 MiB of stack unless
//! `RUST_MIN_STACK` says otherwise). `syn`'s parser, the drop and clone glue of
//! its syntax trees, the lowering and the checker all recurse once per level of
//! an expression, so an input nested deeply enough (700 nested calls with the
//! macro built at opt-level 0) overflows that stack and crashes the compiler.
//! This pass walks the tokens with an explicit stack (it cannot overflow) and
//! rejects, with an ordinary compile error, any input whose expressions could
//! be deeper than the rest of the macro is known to survive (see
//! `docs/syntax.md`, "Size limits", and the hostile-input suite in `hostile.rs`).

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};

/// Most bracket levels (`()`, `[]`, `{}`) one macro input may nest.
pub const MAX_NESTING: usize = 128;

/// Most tokens on one path of enclosing expressions: for every bracket that
/// encloses a token, the tokens of the expression that bracket sits in (up to
/// the nearest `,` or `;` on its level) are added up, plus the tokens of the
/// token's own expression. An expression's syntax tree is never deeper than
/// this count, so it bounds every recursion over the tree (parse, lowering,
/// drop) whether the depth comes from brackets, operator chains
/// (`x + x + … + x`), unary chains (`- - x`) or method chains.
pub const MAX_EXPR_TOKENS: usize = 512;

#[derive(Clone, Copy)]
enum Kind {
    Open,
    Close(Delimiter),
    /// `,` or `;`: ends an expression on its level.
    Sep,
    /// An identifier that cannot continue an expression after a `{…}`
    /// (anything but `as` and `else`); it starts the next item or statement.
    Starter,
    /// `#`: the start of an attribute, hence of an item.
    Hash,
    Other,
}

struct Flat {
    kind: Kind,
    span: Span,
}

/// The tokens in order, brackets as open/close markers. Fails at the first
/// bracket nested deeper than [`MAX_NESTING`] (so a hostile input costs no
/// more than its length).
fn flatten(ts: TokenStream) -> Result<Vec<Flat>, syn::Error> {
    let mut out = Vec::new();
    let mut stack = vec![(ts.into_iter(), None::<(Delimiter, Span)>)];
    while let Some((iter, _)) = stack.last_mut() {
        let Some(tt) = iter.next() else {
            if let Some((_, Some((d, span)))) = stack.pop() {
                out.push(Flat {
                    kind: Kind::Close(d),
                    span,
                });
            }
            continue;
        };
        let (kind, span) = match tt {
            TokenTree::Group(g) => {
                if stack.len() > MAX_NESTING {
                    return Err(crate::spans::err_span(
                        tc_core::diag::codes::INPUT_LIMIT,
                        g.span_open(),
                        format!(
                            "brackets nested too deeply: tc-macros accepts at most {MAX_NESTING} nested \
                             `()`, `[]`, `{{}}` in one tensor fn or module (deeper input would overflow \
                             the compiler's stack); bind inner results with `let`"
                        ),
                    ));
                }
                let d = g.delimiter();
                out.push(Flat {
                    kind: Kind::Open,
                    span: g.span_open(),
                });
                stack.push((g.stream().into_iter(), Some((d, g.span_close()))));
                continue;
            }
            TokenTree::Punct(p) => match p.as_char() {
                ',' | ';' => (Kind::Sep, p.span()),
                '#' => (Kind::Hash, p.span()),
                _ => (Kind::Other, p.span()),
            },
            TokenTree::Ident(i) => {
                let starter = i != "as" && i != "else";
                (if starter { Kind::Starter } else { Kind::Other }, i.span())
            }
            TokenTree::Literal(l) => (Kind::Other, l.span()),
        };
        out.push(Flat { kind, span });
    }
    Ok(out)
}

/// Segment ids (an expression between separators on one level) for every
/// token, and the number of tokens in each segment. A `{…}` followed by an
/// item or statement start ends its segment too: items of a module and
/// statements ending in a block are not one expression.
fn segments(flat: &[Flat]) -> (Vec<usize>, Vec<usize>) {
    let mut seg_of = vec![0; flat.len()];
    let mut len = vec![0usize];
    let mut stack = vec![0usize];
    for (i, f) in flat.iter().enumerate() {
        let cur = *stack.last().expect("root segment");
        seg_of[i] = cur;
        match f.kind {
            Kind::Open => {
                len[cur] += 1;
                len.push(0);
                stack.push(len.len() - 1);
            }
            Kind::Close(d) => {
                stack.pop();
                let next_starts = matches!(
                    flat.get(i + 1).map(|n| n.kind),
                    None | Some(Kind::Starter | Kind::Hash | Kind::Close(_))
                );
                if d == Delimiter::Brace && next_starts {
                    len.push(0);
                    *stack.last_mut().expect("root segment") = len.len() - 1;
                }
            }
            Kind::Sep => {
                len.push(0);
                *stack.last_mut().expect("root segment") = len.len() - 1;
            }
            _ => len[cur] += 1,
        }
    }
    (seg_of, len)
}

/// Check one macro input (the attribute's arguments or the item) against
/// [`MAX_NESTING`] and [`MAX_EXPR_TOKENS`].
pub fn check(ts: &TokenStream) -> Result<(), syn::Error> {
    let flat = flatten(ts.clone())?;
    let (seg_of, len) = segments(&flat);
    // The first token of each segment, where an error points.
    let mut first: Vec<Option<Span>> = vec![None; len.len()];
    // Cost of the brackets enclosing the current token.
    let mut base = vec![0usize];
    for (i, f) in flat.iter().enumerate() {
        let s = seg_of[i];
        let b = *base.last().expect("root cost");
        if first[s].is_none() && !matches!(f.kind, Kind::Sep | Kind::Close(_)) {
            first[s] = Some(f.span);
        }
        let cost = b + len[s];
        if cost > MAX_EXPR_TOKENS {
            return Err(crate::spans::err_span(
                tc_core::diag::codes::INPUT_LIMIT,
                first[s].unwrap_or(f.span),
                format!(
                    "expression too long or too deeply nested: {cost} tokens on one path of enclosing \
                     expressions, tc-macros accepts at most {MAX_EXPR_TOKENS} (deeper input would overflow \
                     the compiler's stack); split it with `let` bindings"
                ),
            ));
        }
        match f.kind {
            Kind::Open => base.push(cost + 1),
            Kind::Close(_) => {
                base.pop();
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn ts(s: &str) -> TokenStream {
        TokenStream::from_str(s).expect("tokenizes")
    }

    #[test]
    fn nesting_limit_is_exact() {
        let ok = format!("{}x{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        let deep = format!(
            "{}x{}",
            "(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        );
        assert!(check(&ts(&ok)).is_ok());
        let e = check(&ts(&deep)).unwrap_err().to_string();
        assert!(e.contains("nested too deeply"), "{e}");
    }

    #[test]
    fn chains_count_through_brackets() {
        // A flat chain: one segment.
        let n = MAX_EXPR_TOKENS / 2;
        assert!(check(&ts(&format!("x{}", " + x".repeat(n - 1)))).is_ok());
        assert!(check(&ts(&format!("x{}", " + x".repeat(n + 1)))).is_err());
        // Trailing operators after a bracket count for what is inside it.
        let nested = format!(
            "{}x{}",
            "(".repeat(40),
            ") + x + x + x + x + x + x + x + x + x + x + x + x".repeat(40)
        );
        let e = check(&ts(&nested)).unwrap_err().to_string();
        assert!(e.contains("too long"), "{e}");
    }

    #[test]
    fn items_and_statements_do_not_add_up() {
        let f =
            "#[tensor_fn] pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] { let y = relu(x); y }";
        let module = format!("mod m {{ {} }}", f.repeat(500));
        assert!(check(&ts(&module)).is_ok());
        let body = format!("fn f() {{ {} x }}", "let y = relu(x); ".repeat(5000));
        assert!(check(&ts(&body)).is_ok());
    }
}
