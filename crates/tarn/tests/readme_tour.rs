//! The README's tour, run as written: every line of every fenced block
//! opened with "```sh tour" in README.md is given to `bash -o pipefail -c`
//! in order, with `tarn` on the PATH (the binary cargo just built) and
//! `$TARN_HOME` set to an empty temporary directory — the only thing the
//! test supplies; the tour itself starts the daemon (`tarn up`). A command
//! that exits non-zero fails the test, and so does a line `#> TEXT` (what
//! the README says the command before it prints, `$TARN_HOME` expanded,
//! compared with runs of blanks made one space) missing from that
//! command's output. Afterwards every pool is healthy and passes
//! `tarn debug check`; `tarn down` stops the daemon even when a step fails.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{mounts_under, path_str, run_with_timeout, tail, TARN};

/// One command of the tour and the output lines it must print.
#[derive(Debug)]
struct Step {
    line_number: usize,
    command: String,
    expected: Vec<String>,
}

/// The steps of the README's "```sh tour" blocks: command lines, each with
/// the `#> ` lines after it; blank lines and comment-only lines skipped.
fn tour_steps(readme: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_tour = false;
    for (index, line) in readme.lines().enumerate() {
        let line_number = index + 1;
        if !in_tour {
            in_tour = line.trim_end() == "```sh tour";
            continue;
        }
        if line.starts_with("```") {
            in_tour = false;
            continue;
        }
        if let Some(expected) = line.strip_prefix("#> ") {
            let step = steps.last_mut().unwrap_or_else(|| panic!("README.md:{line_number}: '#>' before any command"));
            step.expected.push(expected.to_string());
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            steps.push(Step { line_number, command: line.to_string(), expected: Vec::new() });
        }
    }
    assert!(!in_tour, "README.md: a tour block is not closed");
    steps
}

fn blanks_collapsed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs `tarn down` for the tour's home and clears any mount left below
/// the temporary directory, even when the test fails.
struct TourGuard {
    root: PathBuf,
    home: PathBuf,
}

impl Drop for TourGuard {
    fn drop(&mut self) {
        let _ = Command::new(TARN).arg("down").arg("--home").arg(&self.home).output();
        for mountpoint in mounts_under(&self.root) {
            let _ = Command::new("umount").arg("-l").arg(&mountpoint).status();
        }
        if std::thread::panicking() {
            let log = fs::read_to_string(self.home.join("daemon.log")).unwrap_or_default();
            eprintln!("---- tarn daemon log (tail) ----\n{}", tail(&log, 120));
        }
    }
}

fn shell(line: &str, root: &Path, env: &[(&str, String)]) -> Output {
    let mut command = Command::new("bash");
    command.arg("-o").arg("pipefail").arg("-c").arg(line).current_dir(root);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TARN_") {
            command.env_remove(&key);
        }
    }
    for (key, value) in env {
        command.env(key, value);
    }
    run_with_timeout(command, Duration::from_secs(300))
}

#[test]
fn the_readme_tour_runs_as_written() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = fs::read_to_string(&readme_path).expect("read README.md");
    let steps = tour_steps(&readme);
    assert!(steps.len() >= 40, "the tour has only {} commands", steps.len());
    // The verbs the README promises to show stay in the tour.
    for wanted in [
        "tarn up",
        "tarn pool iostat -v tank 1 1",
        "tarn pool list -v",
        "tarn pool status -x",
        "tarn pool history -il tank",
        "tarn diff ",
        "tarn promote ",
        "tarn send ",
        "tarn recv ",
        "tarn set sharenfs=on ",
        "tarn share -l",
    ] {
        assert!(steps.iter().any(|s| s.command.starts_with(wanted)), "no tour line starts with '{wanted}'");
    }

    let tmp = tempfile::Builder::new().prefix("tarn-it-").tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let home = root.join("home");
    fs::create_dir_all(&home).unwrap();
    let _guard = TourGuard { root: root.clone(), home: home.clone() };
    let bin_dir = Path::new(TARN).parent().unwrap();
    let path = format!("{}:{}", path_str(bin_dir), std::env::var("PATH").unwrap_or_default());
    let env = [
        ("TARN_HOME", path_str(&home)),
        // Never the machine's own daemon, should one run at the default place.
        ("TARN_STATE_DIR", path_str(&root.join("no-default-daemon"))),
        ("PATH", path),
    ];

    for step in &steps {
        eprintln!("README.md:{}: $ {}", step.line_number, step.command);
        let out = shell(&step.command, &root, &env);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "README.md:{}: `{}` failed with {}:\nstdout:\n{}\nstderr:\n{stderr}",
            step.line_number,
            step.command,
            out.status,
            tail(&stdout, 40)
        );
        common::assert_no_panic(&out, &step.command);
        let lines: Vec<String> = stdout.lines().map(blanks_collapsed).collect();
        for expected in &step.expected {
            let expected = blanks_collapsed(&expected.replace("$TARN_HOME", &path_str(&home)));
            assert!(
                lines.contains(&expected),
                "README.md:{}: `{}` did not print the line '{expected}' the README shows; it printed:\n{stdout}",
                step.line_number,
                step.command
            );
        }
    }

    // What the tour leaves is healthy and consistent.
    let tarn = |args: &str| {
        let out = shell(&format!("tarn {args}"), &root, &env);
        assert!(out.status.success(), "tarn {args}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(tarn("pool status -x"), "all pools are healthy\n");
    let pools = tarn("pool list -H -o name");
    assert!(pools.lines().count() >= 2, "{pools}");
    for pool in pools.lines() {
        tarn(&format!("debug check {pool}"));
    }
}
