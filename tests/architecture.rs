//! Structure checks from issue #14, over the workspace's own sources: no
//! import cycle between the files of a crate (each pair of modules depends
//! one way, so a reader can take the files bottom-up).
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const CRATES: &[&str] = &["tc-core", "tc-runtime", "tc-llvm", "tc-macros"];

/// Module name → the set of sibling modules its code names as
/// `crate::<module>` (comments and doc links excluded; `lib.rs`, which
/// declares the modules, is not a module here).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(src).expect("src dir") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "rs") {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            if name != "lib" {
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
                for (i, _) in code.match_indices("crate::") {
                    let rest = &code[i + "crate::".len()..];
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
    for c in CRATES {
        let g = graph(&root.join(c).join("src"));
        assert!(g.len() > 3, "{c}: modules not found");
        if let Some(cyc) = find_cycle(&g) {
            cycles.push(format!("{c}: {}", cyc.join(" → ")));
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
