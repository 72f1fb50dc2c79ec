//! `tarn diff [-FHth] SNAPSHOT [SNAPSHOT|FILESYSTEM]` (`zfs diff`).
//!
//! Output lines, as zfs prints them: `[CTIME\t]CHANGE\t[TYPE\t]PATH`, with
//! CHANGE one of `+` (created), `-` (removed), `M` (modified; a change of a
//! file's link count adds `\t(+1)`), `R` (renamed: `OLD -> NEW`, or
//! `OLD\tNEW` with -H). Bytes of a path outside printable ASCII, space and
//! backslash included, are written `\0ooo` (octal) unless -h.
//!
//! Exit status: 2 for a malformed name (the first argument must be a
//! snapshot); 1 when the daemon refuses (no such snapshot, snapshots of
//! different file systems, the later one first, not mounted).

use std::io::Write;
use std::path::Path;

use tarn_daemon::proto::{DiffData, DiffRow, Request};

use crate::commands::{data, send};
use crate::Failure;

#[derive(Clone, Copy, Debug, Default)]
pub struct DiffOptions {
    pub classify: bool,
    pub scripted: bool,
    pub timestamps: bool,
    pub no_mangle: bool,
}

/// zfs's escaping of path bytes.
fn escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        if b > b' ' && b != b'\\' && b < 0o177 {
            out.push(b);
        } else {
            out.extend_from_slice(format!("\\{b:04o}").as_bytes());
        }
    }
}

/// One output line (with its newline), raw bytes.
pub fn diff_line(row: &DiffRow, options: DiffOptions) -> Vec<u8> {
    let mut out = Vec::new();
    let path = |p: &[u8], out: &mut Vec<u8>| {
        if options.no_mangle {
            out.extend_from_slice(p);
        } else {
            escaped(p, out);
        }
    };
    if options.timestamps {
        let secs = row.ctime_ns.div_euclid(1_000_000_000);
        let nanos = row.ctime_ns.rem_euclid(1_000_000_000);
        out.extend_from_slice(format!("{secs:>10}.{nanos:09}\t").as_bytes());
    }
    out.extend_from_slice(format!("{}\t", row.change).as_bytes());
    if options.classify {
        out.extend_from_slice(format!("{}\t", row.file_type).as_bytes());
    }
    path(&row.path, &mut out);
    if let Some(new) = &row.new_path {
        out.extend_from_slice(if options.scripted { b"\t" } else { b" -> " });
        path(new, &mut out);
    }
    if let Some(delta) = row.link_delta {
        out.extend_from_slice(format!("\t({delta:+})").as_bytes());
    }
    out.push(b'\n');
    out
}

/// Checks the names' form: `SNAPSHOT` is `[DATASET]@NAME`, the target a
/// dataset or `[DATASET]@NAME`, and one of them names the dataset.
pub fn check_names(snapshot: &str, target: Option<&str>) -> Result<(), Failure> {
    let bad = |why: String| Failure::usage(format!("cannot diff '{snapshot}': {why}"));
    let Some((dataset, name)) = snapshot.split_once('@') else {
        return Err(bad("not a snapshot (the first argument is DATASET@SNAPSHOT)".into()));
    };
    if name.is_empty() {
        return Err(bad("empty snapshot name".into()));
    }
    match target {
        Some("") => return Err(bad("empty second argument".into())),
        Some(t) if t.split_once('@').is_some_and(|(_, s)| s.is_empty()) => {
            return Err(bad(format!("'{t}' has an empty snapshot name")))
        }
        Some(t) if dataset.is_empty() && t.starts_with('@') => {
            return Err(bad("cannot tell which dataset the snapshots belong to (name it in one of them)".into()))
        }
        None if dataset.is_empty() => return Err(bad("name the dataset (DATASET@SNAPSHOT)".into())),
        _ => {}
    }
    Ok(())
}

pub fn run(socket: &Path, snapshot: &str, target: Option<&str>, options: DiffOptions) -> Result<i32, Failure> {
    check_names(snapshot, target)?;
    let request = Request::Diff { from: snapshot.to_string(), to: target.map(str::to_string) };
    let diff: DiffData = data(send(socket, &request)?)?;
    let mut stdout = std::io::stdout().lock();
    for row in &diff.rows {
        stdout.write_all(&diff_line(row, options)).map_err(|e| Failure::from(format!("cannot write: {e}")))?;
    }
    stdout.flush().map_err(|e| Failure::from(format!("cannot write: {e}")))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(change: char, path: &str) -> DiffRow {
        DiffRow { change, file_type: 'F', path: path.as_bytes().to_vec(), new_path: None, link_delta: None, ctime_ns: 1_700_000_000_123_456_789 }
    }

    fn line(r: &DiffRow, o: DiffOptions) -> String {
        String::from_utf8(diff_line(r, o)).unwrap()
    }

    #[test]
    fn lines_as_zfs_prints_them() {
        let plain = DiffOptions::default();
        assert_eq!(line(&row('+', "/t/a"), plain), "+\t/t/a\n");
        assert_eq!(line(&row('M', "/t/a b\\c\u{e9}"), plain), "M\t/t/a\\0040b\\0134c\\0303\\0251\n");
        assert_eq!(line(&row('M', "/t/a b"), DiffOptions { no_mangle: true, ..plain }), "M\t/t/a b\n");
        let renamed = DiffRow { new_path: Some(b"/t/b".to_vec()), ..row('R', "/t/a") };
        assert_eq!(line(&renamed, plain), "R\t/t/a -> /t/b\n");
        assert_eq!(line(&renamed, DiffOptions { scripted: true, ..plain }), "R\t/t/a\t/t/b\n");
        let all = DiffOptions { classify: true, timestamps: true, ..plain };
        assert_eq!(line(&row('-', "/t/a"), all), "1700000000.123456789\t-\tF\t/t/a\n");
        let linked = DiffRow { link_delta: Some(1), ..row('M', "/t/a") };
        assert_eq!(line(&linked, plain), "M\t/t/a\t(+1)\n");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_names("tank@a", None).is_ok());
        assert!(check_names("tank@a", Some("tank@b")).is_ok());
        assert!(check_names("tank@a", Some("@b")).is_ok());
        assert!(check_names("@a", Some("tank")).is_ok());
        assert!(check_names("tank@a", Some("tank")).is_ok());
        for (a, b) in [("tank", None), ("tank@", None), ("@a", None), ("@a", Some("@b")), ("tank@a", Some("tank@")), ("tank@a", Some(""))] {
            assert_eq!(check_names(a, b).map_err(|f| f.exit).unwrap_err(), 2, "{a} {b:?}");
        }
    }
}
