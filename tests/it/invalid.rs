//! The invalid corpus (`e2e/testdata/invalid/`), offline: `trainset render` refuses every manifest
//! with exit code 1 and a message holding each line its header expects. The e2e test
//! `e2e/tests/invalid.rs` holds the apiserver and the controller to the same lines, so the two
//! sides of every rule are checked against one table.

use std::path::{Path, PathBuf};
use std::process::Command;

use trainset::render::{Format, Operator, render};

/// One corpus file: its expectations and its text.
struct Case {
    path: PathBuf,
    expected: Vec<String>,
    text: String,
}

fn corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/testdata/invalid");
    let mut cases: Vec<Case> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable");
            let expected = text
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("# refused: ")
                        .or_else(|| l.strip_prefix("# failed: "))
                })
                .map(str::to_owned)
                .collect();
            Case {
                path,
                expected,
                text,
            }
        })
        .collect();
    cases.sort_by(|a, b| a.path.cmp(&b.path));
    cases
}

#[test]
fn the_corpus_has_at_least_30_cases_each_with_expectations() {
    let cases = corpus();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for case in &cases {
        assert!(!case.expected.is_empty(), "{}", case.path.display());
    }
}

#[test]
fn render_refuses_every_invalid_manifest_naming_the_field() {
    let mut failures = Vec::new();
    for case in corpus() {
        let name = case.path.display();
        match render(
            &case.text,
            "",
            "default",
            &Operator::default(),
            Format::Yaml,
        ) {
            Ok(_) => failures.push(format!("{name}: rendered")),
            Err(errors) => {
                let text: String = errors.iter().map(|e| format!("{e}\n")).collect();
                for expected in &case.expected {
                    if !text.contains(expected.as_str()) {
                        failures.push(format!("{name}: {expected:?} not in {text}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_cli_exits_1_on_every_invalid_manifest() {
    for case in corpus() {
        let output = Command::new(env!("CARGO_BIN_EXE_trainset"))
            .args(["render", "-f"])
            .arg(&case.path)
            .output()
            .expect("trainset runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{}", case.path.display());
        assert!(output.stdout.is_empty(), "{}", case.path.display());
        assert!(
            case.expected.iter().all(|e| stderr.contains(e.as_str())),
            "{}: {stderr}",
            case.path.display()
        );
    }
}
