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
