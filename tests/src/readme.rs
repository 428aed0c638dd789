//! Commands as the READMEs write them, so tests run them exactly as users will.

/// The one line of the workspace README that starts with `prefix` (after leading spaces),
/// with any trailing `# comment` removed. Panics if there is not exactly one: a test
/// of a README command must notice when the README changes.
pub fn command(prefix: &str) -> String {
    command_in("README.md", prefix)
}

/// As [`command`], in the README at `readme` (relative to the workspace root, e.g.
/// `benches/README.md`).
pub fn command_in(readme: &str, prefix: &str) -> String {
    let path = crate::workspace_root().join(readme);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().map(str::trim_start).filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(lines.len(), 1, "{readme} must have exactly one line starting with {prefix:?}: {lines:?}");
    let line = lines[0];
    line.find("  #").map_or(line, |i| &line[..i]).trim_end().to_string()
}
