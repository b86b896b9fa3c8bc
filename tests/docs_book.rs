//! The book (`docs/`, mdBook) and the README: the book builds with the real mdBook; every page is
//! in `SUMMARY.md` and every entry there is a page; every internal link of the book and of the
//! READMEs leads to a file that exists and, with an anchor, to a heading of it; no link of a book
//! page leaves the book (mdBook would turn it into a broken `.html` link); the generated reference
//! pages are what the code prints now (`make reference` writes them); the README fits on a screen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn book_src() -> PathBuf {
    Path::new(ROOT).join("docs/src")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every Markdown file below `dir`.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("docs/src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(markdown_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The lines of a Markdown text outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        match fence {
            Some(f) if trimmed.starts_with(f) => fence = None,
            Some(_) => {}
            None if trimmed.starts_with("```") => fence = Some("```"),
            None if trimmed.starts_with("~~~") => fence = Some("~~~"),
            None => out.push(line),
        }
    }
    out
}

/// A line without its inline code spans.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links and images of a Markdown text.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let mut depth = 0;
            let end = after
                .char_indices()
                .find(|(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map(|(j, _)| j)
                .unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push(target.trim_matches(['<', '>']).to_string());
            rest = &after[end..];
        }
    }
    out
}

/// The text of a heading as mdBook shows it: inline code, emphasis and link targets removed.
fn heading_text(raw: &str) -> String {
    let mut text = String::new();
    let mut rest = raw;
    while let Some(i) = rest.find("](") {
        text.push_str(&rest[..i]);
        rest = rest[i + 2..].split_once(')').map_or("", |(_, r)| r);
    }
    text.push_str(rest);
    text.chars()
        .filter(|c| !matches!(c, '`' | '*' | '[' | ']'))
        .collect()
}

/// mdBook's id of a heading: letters, digits, `-` and `_` lower-cased, white space as `-`, the
/// rest dropped; a repeated id gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            if let Some(i) = line.find("<a id=\"").or_else(|| line.find("<a name=\"")) {
                let rest = &line[i..];
                let rest = &rest[rest.find('"').map_or(0, |q| q + 1)..];
                out.insert(rest.split('"').next().unwrap_or("").to_string());
            }
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let id: String = heading_text(heading.trim())
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 { id } else { format!("{id}-{n}") });
        *n += 1;
    }
    out
}

/// `base/rel` with `.` and `..` folded, without touching the file system.
fn join(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The broken links of one Markdown file; `in_book` files may not link outside `docs/src`.
fn broken_links(file: &Path, in_book: bool) -> Vec<String> {
    let text = read(file);
    let dir = file.parent().expect("a file's folder");
    let mut broken = Vec::new();
    for target in links(&text) {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with('/')
        {
            if target.is_empty() || target.starts_with('/') {
                broken.push(format!(
                    "{}: empty or absolute link {target:?}",
                    file.display()
                ));
            }
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            join(dir, path)
        };
        if !resolved.exists() {
            broken.push(format!("{}: {target} (no such file)", file.display()));
            continue;
        }
        if in_book && !resolved.starts_with(book_src()) {
            broken.push(format!(
                "{}: {target} leaves the book (mdBook cannot serve it: name the path as code, e.g. `benches/HISTORY.md`)",
                file.display()
            ));
            continue;
        }
        if let Some(anchor) = anchor
            && resolved.extension().is_some_and(|e| e == "md")
            && !anchors(&read(&resolved)).contains(anchor)
        {
            broken.push(format!(
                "{}: {target} (no heading with that anchor in {})",
                file.display(),
                resolved.display()
            ));
        }
    }
    broken
}

#[test]
fn every_internal_link_resolves() {
    let mut broken = Vec::new();
    for page in markdown_files(&book_src()) {
        broken.extend(broken_links(&page, true));
    }
    for readme in ["README.md", "charts/evictord/README.md"] {
        broken.extend(broken_links(&Path::new(ROOT).join(readme), false));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_is_in_the_summary_and_every_entry_is_a_page() {
    let summary = book_src().join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&read(&summary))
        .iter()
        .map(|l| join(&book_src(), l))
        .collect();
    let pages: BTreeSet<PathBuf> = markdown_files(&book_src())
        .into_iter()
        .filter(|p| *p != summary)
        .collect();
    let missing: Vec<_> = pages.difference(&listed).collect();
    let dangling: Vec<_> = listed.difference(&pages).collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
    assert!(
        dangling.is_empty(),
        "SUMMARY.md entries without a page: {dangling:?}"
    );
}

#[test]
fn the_readme_fits_on_a_screen() {
    let lines = read(&Path::new(ROOT).join("README.md")).lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; the rest belongs in the book"
    );
}

fn printed(binary: &str, args: &[&str]) -> String {
    let out = Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {binary}: {e}"));
    assert!(out.status.success(), "{binary} {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn the_generated_reference_pages_are_what_the_code_prints() {
    let pages = [
        (
            "evictord-flags.md",
            printed(env!("CARGO_BIN_EXE_evictord"), &["docs", "flags"]),
        ),
        (
            "plugin-flags.md",
            printed(env!("CARGO_BIN_EXE_kubectl-evictord"), &["docs"]),
        ),
        (
            "crds.md",
            printed(env!("CARGO_BIN_EXE_evictord"), &["docs", "crds"]),
        ),
    ];
    for (name, now) in pages {
        let committed = read(&book_src().join("reference").join(name));
        assert!(
            committed == now,
            "docs/src/reference/{name} differs from what the code prints: run `make reference`"
        );
    }
}

/// mdBook: from `$MDBOOK_DIR`, or installed by `tests/tools/mdbook.sh`.
fn mdbook() -> PathBuf {
    let dir = match std::env::var_os("MDBOOK_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let out = Command::new("bash")
                .arg(Path::new(ROOT).join("tests/tools/mdbook.sh"))
                .output()
                .expect("running tests/tools/mdbook.sh");
            assert!(
                out.status.success(),
                "tests/tools/mdbook.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    dir.join("mdbook")
}

#[test]
fn the_book_builds() {
    let out_dir = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new(mdbook())
        .arg("build")
        .arg(Path::new(ROOT).join("docs"))
        .arg("--dest-dir")
        .arg(out_dir.path())
        .output()
        .expect("running mdbook");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook build warned:\n{log}"
    );
    for page in markdown_files(&book_src()) {
        let rel = page.strip_prefix(book_src()).expect("below docs/src");
        if rel == Path::new("SUMMARY.md") {
            continue;
        }
        let html = out_dir.path().join(rel.with_extension("html"));
        assert!(html.exists(), "{} was not rendered", html.display());
        // The anchors this test computes are the ids mdBook gave the headings.
        let rendered = read(&html);
        for anchor in anchors(&read(&page)) {
            assert!(
                rendered.contains(&format!("id=\"{anchor}\"")),
                "{}: no id {anchor:?} in the rendered page",
                rel.display()
            );
        }
    }
}
