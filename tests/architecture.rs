//! Structure checks from issue #14, over the workspace's own sources: no
//! import cycle between the files of a crate (each pair of modules depends
//! one way, so a reader can take the files bottom-up).
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const CRATES: &[&str] = &["tc-core", "tc-runtime", "tc-llvm", "tc-macros"];

/// Module name → the set of sibling modules its code names as
/// `<prefix><module>` (`crate::` for a crate's top modules,
/// `crate::kernels::` for those of tc-llvm's `kernels/`; comments and doc
/// links excluded; `lib.rs` and `mod.rs`, which declare the modules, are
/// not modules here).
fn graph(src: &Path, prefix: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(src).expect("src dir") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "rs") {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            if name != "lib" && name != "mod" {
                files.insert(name, std::fs::read_to_string(&p).expect("read"));
            }
        } else if p.join("mod.rs").is_file() {
            // A directory module is one node: its files together.
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let mut text = String::new();
            for f in std::fs::read_dir(&p).expect("module dir") {
                let f = f.expect("entry").path();
                if f.extension().is_some_and(|x| x == "rs") {
                    text += &std::fs::read_to_string(&f).expect("read");
                }
            }
            files.insert(name, text);
        }
    }
    let names: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(m, text)| {
            let mut deps = BTreeSet::new();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                for (i, _) in code.match_indices(prefix) {
                    let rest = &code[i + prefix.len()..];
                    let id: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    // `use crate::{a, b}` names several modules.
                    let ids: Vec<String> = if rest.starts_with('{') {
                        rest[1..]
                            .split(['}', ','])
                            .map(|s| s.trim().split("::").next().unwrap_or("").to_string())
                            .collect()
                    } else {
                        vec![id]
                    };
                    for id in ids {
                        if names.contains(&id) && &id != m {
                            deps.insert(id);
                        }
                    }
                }
            }
            (m.clone(), deps)
        })
        .collect()
}

/// A cycle through `g`, if any, as the list of modules on it.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cyc = path[at..].to_vec();
            cyc.push(m.to_string());
            return Some(cyc);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_cycles_between_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cycles = Vec::new();
    let trees = CRATES
        .iter()
        .map(|c| (root.join(c).join("src"), "crate::"))
        .chain([(root.join("tc-llvm/src/kernels"), "crate::kernels::")]);
    for (dir, prefix) in trees {
        let g = graph(&dir, prefix);
        assert!(g.len() > 3, "{}: modules not found", dir.display());
        if let Some(cyc) = find_cycle(&g) {
            cycles.push(format!("{}: {}", dir.display(), cyc.join(" → ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&g).map(|c| c.len()), Some(4));
    g.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&g), None);
}

/// The longest a function in the library crates may be (issue #14: a
/// reader sees one on a screen or two).
const MAX_FN_LINES: usize = 120;

/// `src` with comments, string and char literals blanked to spaces (line
/// breaks kept), so braces and `fn` inside them are not code.
fn code_only(src: &str) -> Vec<char> {
    let s: Vec<char> = src.chars().collect();
    let mut out = s.clone();
    let blank = |out: &mut Vec<char>, a: usize, b: usize| {
        for c in &mut out[a..b.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        let at = |k: usize| s.get(k).copied().unwrap_or('\0');
        let start = i;
        if at(i) == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if at(i) == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= s.len() {
                    break;
                } else if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if at(i) == 'r'
            && (at(i + 1) == '"' || at(i + 1) == '#')
            && !at(i.wrapping_sub(1)).is_alphanumeric()
        {
            // Raw string r#"…"#: ends at a quote followed by as many #.
            let mut j = i + 1;
            while at(j) == '#' {
                j += 1;
            }
            if at(j) != '"' {
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            i = j + 1;
            while i < s.len() && !(s[i] == '"' && (1..=hashes).all(|h| at(i + h) == '#')) {
                i += 1;
            }
            i += 1 + hashes;
        } else if at(i) == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if at(i) == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A char literal (a lifetime has no closing quote after one char).
            i += 1;
            while i < s.len() && s[i] != '\'' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            i += 1;
            continue;
        }
        blank(&mut out, start, i);
    }
    out
}

/// Every `fn` with a body in `src`: (name, first line, line count).
fn fn_lengths(src: &str) -> Vec<(String, usize, usize)> {
    let c = code_only(src);
    let line_of = |k: usize| c[..k].iter().filter(|&&ch| ch == '\n').count() + 1;
    let word = |k: usize| {
        c.get(k)
            .is_some_and(|ch| ch.is_alphanumeric() || *ch == '_')
    };
    let mut found = Vec::new();
    for k in 0..c.len().saturating_sub(2) {
        if c[k] != 'f' || c[k + 1] != 'n' || c[k + 2] != ' ' || (k > 0 && word(k - 1)) {
            continue;
        }
        let name: String = c[k + 3..]
            .iter()
            .take_while(|ch| ch.is_alphanumeric() || **ch == '_')
            .collect();
        if name.is_empty() {
            continue; // a `fn(..)` pointer type
        }
        // The body opens at the first `{` or the item ends at a `;`
        // outside the signature's parentheses and generics.
        let (mut j, mut paren) = (k, 0i32);
        while j < c.len() && !(paren == 0 && (c[j] == '{' || c[j] == ';')) {
            match c[j] {
                '(' | '[' => paren += 1,
                ')' | ']' => paren -= 1,
                _ => {}
            }
            j += 1;
        }
        if j >= c.len() || c[j] == ';' {
            continue;
        }
        let mut depth = 0;
        let mut end = j;
        for (e, ch) in c.iter().enumerate().skip(j) {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = e;
                break;
            }
        }
        found.push((name, line_of(k), line_of(end) - line_of(k) + 1));
    }
    found
}

fn rs_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_function_over_the_line_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    let mut seen = 0;
    for c in CRATES {
        let mut files = Vec::new();
        rs_files(&root.join(c).join("src"), &mut files);
        files.sort();
        for f in files {
            let src = std::fs::read_to_string(&f).expect("read");
            for (name, line, n) in fn_lengths(&src) {
                seen += 1;
                if n > MAX_FN_LINES {
                    let rel = f.strip_prefix(root).unwrap_or(&f).display().to_string();
                    long.push(format!("{rel}:{line} fn {name}: {n} lines"));
                }
            }
        }
    }
    assert!(seen > 500, "functions not found ({seen})");
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_counter_skips_literals_and_comments() {
    let src = "fn a() {\n    let s = \"}\"; // }\n    let c = '{';\n    let r = r#\"}\"#;\n}\n\
               fn b<'x>(f: fn(u8) -> u8) -> &'x str { /* { */ \"\" }\ntrait T { fn c(&self); }\n";
    let got = fn_lengths(src);
    assert_eq!(
        got,
        vec![("a".to_string(), 1, 5), ("b".to_string(), 6, 1)],
        "{got:?}"
    );
}

/// What a user's program links or runs: the library crates and the server.
const SOURCE_ROOTS: &[&str] = &[
    "tc-core/src",
    "tc-runtime/src",
    "tc-llvm/src",
    "tc-macros/src",
    "tc-quant/src",
    "tc-serve/src",
    "src",
];

/// The one module that reads `TC_*` variables (`tc_core::env`).
const ENV_MODULE: &str = "tc-core/src/env.rs";

/// Every `.rs` file under [`SOURCE_ROOTS`], sorted: its path relative to
/// the workspace root, and its text.
fn library_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in SOURCE_ROOTS {
        rs_files(&root.join(dir), &mut files);
    }
    files.sort();
    let out: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
            (rel, std::fs::read_to_string(f).expect("read"))
        })
        .collect();
    assert!(out.len() > 100, "sources not found ({})", out.len());
    out
}

/// `scan`'s findings in every library source, as `path:line: text`.
fn findings(scan: impl Fn(&str) -> Vec<(usize, String)>, skip: &[&str]) -> Vec<String> {
    library_sources()
        .into_iter()
        .filter(|(rel, _)| !skip.contains(&rel.as_str()))
        .flat_map(|(rel, src)| {
            scan(&src)
                .into_iter()
                .map(move |(line, text)| format!("{rel}:{line}: {text}"))
        })
        .collect()
}

/// Every line of `src` (code before any `//`) that reads a `TC_*` variable
/// or names one in a string literal: `env::var`/`var_os` with anything but
/// a literal naming a non-tc variable, or a `"TC_…"` literal that is not a
/// build-time `env!` nor a tc-serve flag's clap attribute.
fn env_reads(src: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut bad = code
            .match_indices("\"TC_")
            .any(|(at, _)| !code[..at].ends_with("env!(") && !code[..at].ends_with("env = "));
        for call in ["env::var(", "env::var_os("] {
            for (at, _) in code.match_indices(call) {
                let arg = &code[at + call.len()..];
                bad |= !arg.starts_with('"') || arg.starts_with("\"TC_");
            }
        }
        if bad {
            found.push((i + 1, line.trim().to_string()));
        }
    }
    found
}

#[test]
fn only_the_env_module_reads_tc_variables() {
    let reads = findings(env_reads, &[ENV_MODULE]);
    assert!(
        reads.is_empty(),
        "environment reads outside {ENV_MODULE} (add the variable to tc_core::env and read it there):\n{}",
        reads.join("\n")
    );
}

/// The one module of tc-llvm that names a `tc_core::env` variable: the
/// settings of the JIT and its kernels are read there, once, and a kernel
/// gets them from the `ExecCtx` it is handed (issue #45).
const LLVM_SETTINGS: &str = "tc-llvm/src/ctx.rs";

/// Every line of `src` (code before any `//`) naming `tc_core::env`.
fn settings_reads(src: &str) -> Vec<(usize, String)> {
    src.lines()
        .enumerate()
        .filter(|(_, l)| l.split("//").next().unwrap_or("").contains("tc_core::env"))
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

/// Every line of `src` (code before any `//`) asking the calling thread's
/// pool state: a kernel is told by its `ExecCtx` instead.
fn session_reads(src: &str) -> Vec<(usize, String)> {
    src.lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or("");
            code.contains("in_session()") || code.contains("in_serial()")
        })
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

#[test]
fn kernels_read_their_settings_from_the_context() {
    let reads: Vec<String> = findings(settings_reads, &[LLVM_SETTINGS])
        .into_iter()
        .filter(|f| f.starts_with("tc-llvm/"))
        .chain(
            findings(session_reads, &[])
                .into_iter()
                .filter(|f| f.starts_with("tc-llvm/src/kernels/")),
        )
        .collect();
    assert!(
        reads.is_empty(),
        "settings or pool state read outside {LLVM_SETTINGS} (add a field to ctx::Settings \
         or ExecCtx and hand it down):\n{}",
        reads.join("\n")
    );
    let ctx = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(LLVM_SETTINGS))
        .expect("read");
    assert!(
        !settings_reads(&ctx).is_empty(),
        "{LLVM_SETTINGS} reads no setting"
    );
    assert!(
        !ctx.lines().any(|l| l.contains("use crate::")),
        "{LLVM_SETTINGS} imports from its crate: every module must be able to depend on it"
    );
}

#[test]
fn the_settings_scanners_find_reads() {
    let src = "let a = tc_core::env::TC_MM_PF.parse();\n// tc_core::env::TC_X\n\
               if crate::team::in_session() {}\nlet s = ctx.session;\n";
    let lines = |f: fn(&str) -> Vec<(usize, String)>| -> Vec<usize> {
        f(src).into_iter().map(|(l, _)| l).collect()
    };
    assert_eq!(lines(settings_reads), vec![1]);
    assert_eq!(lines(session_reads), vec![3]);
}

#[test]
fn the_env_scanner_finds_reads() {
    let src = "let a = std::env::var(\"TC_X\");\nlet b = std::env::var(k);\n\
               let c = env!(\"TC_FP\");\nlet d = std::env::var_os(\"HOME\");\n\
               // std::env::var(\"TC_Y\")\n#[arg(long, env = \"TC_SERVE_PORT\")]\n\
               static S: Switch = Switch::new(\"TC_Z\");\n";
    let lines: Vec<usize> = env_reads(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, vec![1, 2, 7]);
}

/// Every line of `src` (code before any `//`) that casts a tuple field `.0`
/// to an integer (`v.0 as usize`): the raw number of an id such as
/// `ir::Value`, used as an index or in arithmetic. Ids are opaque (issue
/// #45): per-value data is a `ValueMap`, parameters and instructions are
/// told apart by `Function::value_def`. Only an id's own accessor
/// (`self.0 as usize`) converts; a float literal (`1.0 as i64`) is no id.
fn raw_id_casts(src: &str) -> Vec<(usize, String)> {
    const INTS: &[&str] = &[
        "usize", "isize", "u8", "u16", "u32", "u64", "u128", "i8", "i16", "i32", "i64", "i128",
    ];
    let mut found = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let bad = code.match_indices(".0 as ").any(|(at, m)| {
            let ty: String = code[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let start = code[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |k| k + 1);
            let token = &code[start..at];
            let literal = token.starts_with(|c: char| c.is_ascii_digit());
            INTS.contains(&ty.as_str()) && !literal && token != "self"
        });
        if bad {
            found.push((i + 1, line.trim().to_string()));
        }
    }
    found
}

#[test]
fn no_raw_id_casts_in_the_sources() {
    let casts = findings(raw_id_casts, &[]);
    assert!(
        casts.is_empty(),
        "raw id numbers (index a ValueMap, ask Function::value_def, or give the id an accessor):\n{}",
        casts.join("\n")
    );
}

#[test]
fn the_id_cast_scanner_finds_casts() {
    let src = "let a = vals[v.0 as usize];\nlet b = (x.0 as u32) + 1;\n\
               fn index(self) -> usize { self.0 as usize }\nlet c = 1.0 as i64;\n\
               // vals[v.0 as usize]\nlet d = p.0 as f32;\nlet e = f(t).0 as i64;\n\
               let g = m.tuple_0 as usize;\n";
    let lines: Vec<usize> = raw_id_casts(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, vec![1, 2, 7]);
}

#[test]
fn the_environment_page_is_the_env_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/environment.md")).expect("read");
    let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `TC_")).collect();
    let table: Vec<String> = tc::core::env::ALL
        .iter()
        .map(|v| format!("| `{}` | {} | {} |", v.name, v.default, v.doc))
        .collect();
    assert_eq!(
        rows, table,
        "docs/environment.md differs from tc_core::env::ALL"
    );
}

/// The files that may match over every `Op` variant: the op's definition
/// and visitors, its typing, concrete and denotation rules, its surface
/// syntax and its lowering (docs/architecture.md, "Adding an op").
const OP_MATCH_FILES: &[&str] = &[
    "tc-core/src/ir.rs",
    "tc-core/src/check/body.rs",
    "tc-core/src/concrete.rs",
    "tc-runtime/src/interp.rs",
    "tc-macros/src/lower.rs",
    "tc-llvm/src/plan.rs",
    "tc-llvm/src/codegen/kernels.rs",
];

/// `Op`'s variants, read from its definition.
fn op_variants(ir: &str) -> Vec<String> {
    let body = ir.split("pub enum Op {").nth(1).expect("enum Op");
    let body = &body[..body.find("\n}").expect("end of enum Op")];
    body.lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| l.chars().take_while(|c| c.is_alphanumeric()).collect())
        .collect()
}

/// How many distinct `Op` variants `src` names as `Op::Variant` (not
/// `BinaryOp::…` and the like).
fn variants_named(src: &str, variants: &[String]) -> usize {
    let code: String = src
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    variants
        .iter()
        .filter(|v| {
            let pat = format!("Op::{v}");
            code.match_indices(&pat).any(|(at, _)| {
                let before = code[..at].chars().next_back();
                let after = code[at + pat.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .count()
}

#[test]
fn only_the_listed_files_match_over_every_op() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ir = std::fs::read_to_string(root.join("tc-core/src/ir.rs")).expect("read");
    let variants = op_variants(&ir);
    assert!(
        variants.len() >= 20,
        "Op's variants not found: {variants:?}"
    );
    // Two thirds of the variants: a dispatch over all of them, with a
    // wildcard or grouped arms for the rest.
    let whole = variants.len() * 2 / 3;
    let arch = std::fs::read_to_string(root.join("docs/architecture.md")).expect("read");
    for f in OP_MATCH_FILES {
        assert!(
            arch.contains(&format!("`{f}`")),
            "docs/architecture.md does not list {f}"
        );
    }
    let unlisted: Vec<String> = library_sources()
        .into_iter()
        .filter(|(rel, _)| !OP_MATCH_FILES.contains(&rel.as_str()))
        .map(|(rel, src)| (rel, variants_named(&src, &variants)))
        .filter(|&(_, n)| n >= whole)
        .map(|(rel, n)| format!("{rel}: {n} of {} variants", variants.len()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "files matching over Op outside docs/architecture.md's list (use Op::operands / try_map, or list the file):\n{}",
        unlisted.join("\n")
    );
}

#[test]
fn the_variant_counter_ignores_other_enums() {
    let v: Vec<String> = ["Unary", "Cast", "Dim"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let src = "match op { Op::Unary(..) => 1, BinaryOp::Cast => 2, Op::DimX => 3 } // Op::Dim";
    assert_eq!(variants_named(src, &v), 1);
}

/// The test files of a crate's `tests/` that no test binary compiles: with
/// `autotests = false` a crate names its binaries as `[[test]]`s, and a file
/// there must be one of them or a module (`mod name;`) of one, or it would
/// never run. `manifest` is the crate's Cargo.toml, `roots` the text of each
/// `[[test]]` root by its path, `files` the file names under `tests/`.
fn unbuilt_test_files(
    manifest: &str,
    roots: &dyn Fn(&str) -> String,
    files: &[String],
) -> Vec<String> {
    if !manifest.lines().any(|l| l.trim() == "autotests = false") {
        return Vec::new();
    }
    let mut built = BTreeSet::new();
    let mut in_test = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_test = line == "[[test]]";
        } else if let Some(path) = line.strip_prefix("path = \"").filter(|_| in_test) {
            let path = path.trim_end_matches('"');
            let Some(file) = path.strip_prefix("tests/") else {
                continue;
            };
            built.insert(file.to_string());
            for l in roots(path).lines() {
                let l = l.strip_prefix("pub ").unwrap_or(l);
                if let Some(m) = l.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
                    built.insert(format!("{m}.rs"));
                }
            }
        }
    }
    files
        .iter()
        .filter(|f| !built.contains(f.as_str()))
        .cloned()
        .collect()
}

#[test]
fn every_test_file_is_in_a_test_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<std::path::PathBuf> = std::fs::read_dir(root)
        .expect("workspace root")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("tests").is_dir())
        .collect();
    crates.push(root.to_path_buf());
    crates.sort();
    let mut unbuilt = Vec::new();
    let mut merged = 0;
    for dir in &crates {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
        let mut files: Vec<String> = std::fs::read_dir(dir.join("tests"))
            .expect("tests dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "rs"))
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let read = |path: &str| std::fs::read_to_string(dir.join(path)).unwrap_or_default();
        merged += manifest.contains("autotests = false") as usize;
        for f in unbuilt_test_files(&manifest, &read, &files) {
            let rel = dir.join("tests").join(f);
            unbuilt.push(rel.strip_prefix(root).unwrap_or(&rel).display().to_string());
        }
    }
    assert!(
        merged >= 5,
        "crates with autotests = false not found ({merged})"
    );
    assert!(
        unbuilt.is_empty(),
        "test files no test binary compiles (declare each as a module of its crate's tests/all.rs, or as a [[test]] in its Cargo.toml):\n{}",
        unbuilt.join("\n")
    );
}

#[test]
fn the_test_file_finder_reads_test_targets_and_their_modules() {
    let manifest = "[package]\nautotests = false\n\n[[test]]\nname = \"all\"\npath = \"tests/all.rs\"\n\n\
                    [[test]]\nname = \"own\"\npath = \"tests/own.rs\"\n\n[[bench]]\npath = \"tests/bench.rs\"\n";
    let roots = |p: &str| match p {
        "tests/all.rs" => {
            "//! mod doc;\nmod util;\npub mod a;\nmod c;\n#[path = \"../x.rs\"]\nmod x;\n"
                .to_string()
        }
        _ => String::new(),
    };
    let files: Vec<String> = [
        "a.rs", "all.rs", "b.rs", "bench.rs", "c.rs", "own.rs", "doc.rs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        unbuilt_test_files(manifest, &roots, &files),
        ["b.rs", "bench.rs", "doc.rs"]
    );
    let auto = manifest.replace("autotests = false", "");
    assert!(unbuilt_test_files(&auto, &roots, &files).is_empty());
}

/// The items a library crate's `lib.rs` defines besides modules, imports
/// and functions (its entry points): a shared type or constant there
/// would make every module that names it depend on the entry point.
fn lib_items(src: &str) -> Vec<String> {
    let kinds = [
        "struct ", "enum ", "const ", "static ", "type ", "trait ", "impl ",
    ];
    src.lines()
        .map(|l| l.split("//").next().unwrap_or("").trim_start())
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.strip_prefix("pub ").unwrap_or(l))
        .map(|l| l.strip_prefix("pub(crate) ").unwrap_or(l))
        .filter(|l| kinds.iter().any(|k| l.starts_with(k)))
        .map(String::from)
        .collect()
}

#[test]
fn library_roots_only_declare_modules_reexports_and_entry_points() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for c in ["tc-core", "tc-runtime", "tc-llvm", "tc-quant"] {
        let src = std::fs::read_to_string(root.join(c).join("src/lib.rs")).expect("read");
        for item in lib_items(&src) {
            found.push(format!("{c}/src/lib.rs: {item}"));
        }
    }
    assert!(
        found.is_empty(),
        "move these into a leaf module and re-export them:\n{}",
        found.join("\n")
    );
    // The shared types of tc-llvm live in a module that imports nothing of
    // the crate.
    let g = graph(&root.join("tc-llvm/src"), "crate::");
    for leaf in ["options", "ctx"] {
        assert_eq!(
            g.get(leaf),
            Some(&BTreeSet::new()),
            "tc-llvm's {leaf} module imports {:?}",
            g.get(leaf)
        );
    }
}

#[test]
fn the_lib_item_scanner_finds_items() {
    let src = "pub mod a;\npub use a::X;\n/// doc\npub struct S;\n#[derive(Debug)]\nenum E {}\n// const C: u8 = 1;\npub(crate) const K: u8 = 1;\nimpl S {}\npub fn call() {}\n";
    assert_eq!(
        lib_items(src),
        vec!["struct S;", "enum E {}", "const K: u8 = 1;", "impl S {}"]
    );
}
