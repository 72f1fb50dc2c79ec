//! `tarn load-key`, `unload-key`, `change-key`, the key of `create -o
//! encryption=…` and `pool import -l`: the CLI side, which asks for keys.
//!
//! A key whose location is `prompt` is read here: on a terminal without
//! echo (a new one twice), otherwise from stdin (a passphrase or hex key:
//! its first line; a raw key: its 32 bytes), and sent to the daemon in the
//! request, never on the command line (which the pool history records).
//!
//! What is read goes straight into a `tarn_keys::Secret` (locked, out of
//! core dumps, zeroed when dropped): standard input is read through its
//! descriptor, not `Stdin`, whose buffer would keep a copy (and would read
//! past the line: `pool import -l` reads one key after another), and the
//! request carries it as `KeyBytes`; the request line is zeroed once sent
//! (`client.rs`).

use std::io::IsTerminal;
use std::path::Path;

use tarn_daemon::keys::KeyRoot;
use tarn_daemon::proto::{KeyBytes, Request};
use tarn_keys::{Secret, KEY_FILE_MAX};

use crate::commands::{data, send};
use crate::Failure;

/// `read(2)` on standard input into `buf`, again when interrupted.
fn read_stdin(buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        // SAFETY: reads at most `buf.len()` bytes into memory `buf` owns.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if let Ok(n) = usize::try_from(n) {
            return Ok(n);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One line of standard input without its line end, at most
/// `KEY_FILE_MAX + 1` bytes (longer is no key: the daemon refuses it),
/// read a byte at a time so that nothing after the line is taken.
fn read_line() -> std::io::Result<Secret> {
    let mut buf = Secret::zeroed(KEY_FILE_MAX + 1);
    let mut len = 0;
    while len < buf.len() {
        if read_stdin(&mut buf.expose_mut()[len..=len])? == 0 {
            break;
        }
        if buf.expose()[len] == b'\n' {
            break;
        }
        len += 1;
    }
    if len > 0 && buf.expose()[len - 1] == b'\r' {
        len -= 1;
    }
    buf.truncate(len);
    Ok(buf)
}

/// The rest of standard input, at most `KEY_FILE_MAX + 1` bytes (a raw key).
fn read_all() -> std::io::Result<Secret> {
    let mut buf = Secret::zeroed(KEY_FILE_MAX + 1);
    let mut len = 0;
    while len < buf.len() {
        match read_stdin(&mut buf.expose_mut()[len..])? {
            0 => break,
            n => len += n,
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// `text` on stderr, then a line read from the terminal without echo.
fn prompt_secret(text: &str) -> Result<Secret, Failure> {
    use std::io::Write;
    eprint!("{text}");
    let _ = std::io::stderr().flush();
    // SAFETY: termios calls on stdin's descriptor with a zeroed struct they fill.
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    let have_tty = unsafe { libc::tcgetattr(0, &mut saved) } == 0;
    if have_tty {
        let mut quiet = saved;
        quiet.c_lflag &= !libc::ECHO;
        // SAFETY: as above.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &quiet) };
    }
    let read = read_line();
    if have_tty {
        // SAFETY: restoring the settings read above.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &saved) };
        eprintln!();
    }
    Ok(read.map_err(|e| format!("cannot read the key: {e}"))?)
}

/// Key material for `what` in `format`; `new`: asked twice on a terminal.
pub(crate) fn read_key(format: &str, what: &str, new: bool) -> Result<KeyBytes, Failure> {
    let noun = if format == "passphrase" { "passphrase" } else { "key" };
    if !std::io::stdin().is_terminal() {
        let read = if format == "raw" { read_all() } else { read_line() };
        return Ok(KeyBytes::new(read.map_err(|e| format!("cannot read the {noun} from stdin: {e}"))?));
    }
    if format == "raw" {
        return Err(format!("a raw key cannot be typed: give it on stdin or with keylocation=file://PATH ({what})").into());
    }
    let adjective = if new { "new " } else { "" };
    let first = prompt_secret(&format!("Enter {adjective}{noun} for '{what}': "))?;
    if new {
        let second = prompt_secret(&format!("Re-enter {adjective}{noun} for '{what}': "))?;
        if first.expose() != second.expose() {
            return Err(format!("{noun}s do not match").into());
        }
    }
    Ok(KeyBytes::new(first))
}

fn prop_of<'a>(props: &'a [(String, String)], name: &str) -> Option<&'a str> {
    props.iter().rev().find(|(p, _)| p == name).map(|(_, v)| v.as_str())
}

/// The key `create -o keyformat=… [-o keylocation=prompt]` needs from
/// the user (None: not a new root, or the key is in a file).
pub(crate) fn create_key(dataset: &str, props: &[(String, String)]) -> Result<Option<KeyBytes>, Failure> {
    let Some(format) = prop_of(props, "keyformat") else { return Ok(None) };
    if prop_of(props, "keylocation").unwrap_or("prompt") != "prompt" {
        return Ok(None);
    }
    read_key(format, dataset, true).map(Some)
}

fn roots(socket: &Path, datasets: Vec<String>, recursive: bool, all: bool) -> Result<Vec<KeyRoot>, Failure> {
    data(send(socket, &Request::KeyRoots { datasets, recursive, all })?)
}

/// `load-key [-r|-a] [-n] [-L LOCATION] DATASET…`: each root in turn; one
/// that fails is reported and the others still load (exit 1 at the end).
pub(crate) fn load_key(socket: &Path, datasets: Vec<String>, recursive: bool, all: bool, noop: bool, location: Option<String>) -> Result<i32, Failure> {
    let roots = roots(socket, datasets, recursive, all)?;
    let many = roots.len() > 1 || recursive || all;
    let (mut loaded, mut failed) = (0, 0);
    for root in roots {
        if root.loaded && !noop {
            if !many {
                return Err(format!("cannot load key for '{}': key already loaded", root.name).into());
            }
            continue;
        }
        let from = location.as_deref().unwrap_or(&root.keylocation);
        let key = if from == "prompt" { Some(read_key(&root.keyformat, &root.name, false)?) } else { None };
        let request = Request::LoadKey { dataset: root.name.clone(), noop, location: location.clone(), key };
        match send(socket, &request) {
            Ok(_) => loaded += 1,
            Err(f) if many => {
                eprintln!("tarn: {}", f.message);
                failed += 1;
            }
            Err(f) => return Err(f),
        }
    }
    if many {
        let verb = if noop { "verified" } else { "loaded" };
        println!("{loaded} / {} key(s) successfully {verb}", loaded + failed);
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `unload-key [-r|-a] DATASET…`.
pub(crate) fn unload_key(socket: &Path, datasets: Vec<String>, recursive: bool, all: bool) -> Result<i32, Failure> {
    let roots = roots(socket, datasets, recursive, all)?;
    let many = roots.len() > 1 || recursive || all;
    let (mut done, mut failed) = (0, 0);
    for root in roots {
        if !root.loaded {
            if !many {
                return Err(format!("cannot unload key for '{}': key already unloaded", root.name).into());
            }
            continue;
        }
        match send(socket, &Request::UnloadKey { dataset: root.name.clone() }) {
            Ok(_) => done += 1,
            Err(f) if many => {
                eprintln!("tarn: {}", f.message);
                failed += 1;
            }
            Err(f) => return Err(f),
        }
    }
    if many {
        println!("{done} / {} key(s) successfully unloaded", done + failed);
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `change-key [-l] [-o keyformat|keylocation|pbkdf2iters=…] DATASET`
/// (a dataset that is not an encryption root becomes one: keyformat as
/// its root's unless given, keylocation `prompt` unless given), or
/// `change-key [-l] -i ROOT` (join the parent's encryption root).
pub(crate) fn change_key(socket: &Path, dataset: String, props: Vec<(String, String)>, load: bool, inherit: bool) -> Result<i32, Failure> {
    let [keyformat, keylocation, keystatus, root] = key_props(socket, &dataset)?;
    if root == "-" {
        return Err(format!("cannot change key for '{dataset}': '{dataset}' is not encrypted").into());
    }
    if keystatus != "available" {
        if !load {
            return Err(format!("cannot change key for '{dataset}': key is not loaded (load it, or use -l)").into());
        }
        load_key(socket, vec![root.clone()], false, false, false, None)?;
    }
    if inherit {
        send(socket, &Request::ChangeKey { dataset, props, key: None, inherit: true })?;
        return Ok(0);
    }
    let format = prop_of(&props, "keyformat").unwrap_or(&keyformat).to_string();
    // A root keeps its keylocation unless given; a new root's is `prompt`.
    let location = match prop_of(&props, "keylocation") {
        Some(l) => l.to_string(),
        None if root == dataset => keylocation,
        None => "prompt".into(),
    };
    let key = if location == "prompt" { Some(read_key(&format, &dataset, true)?) } else { None };
    send(socket, &Request::ChangeKey { dataset, props, key, inherit: false })?;
    Ok(0)
}

/// `keyformat`, `keylocation`, `keystatus` and `encryptionroot` of `dataset`.
fn key_props(socket: &Path, dataset: &str) -> Result<[String; 4], Failure> {
    let wanted = ["keyformat", "keylocation", "keystatus", "encryptionroot"];
    let request = Request::TypedProps {
        datasets: vec![dataset.to_string()],
        recursive: false,
        props: wanted.iter().map(|p| p.to_string()).collect(),
        parsable: true,
        types: vec!["filesystem".into()],
        depth: None,
        sort: vec![],
    };
    let rows: Vec<tarn_daemon::proto::DatasetRow> = data(send(socket, &request)?)?;
    let row = rows.into_iter().next().ok_or_else(|| format!("cannot change key for '{dataset}': dataset does not exist"))?;
    Ok(wanted.map(|p| row.props.iter().find(|c| c.property == p).map_or_else(|| "-".to_string(), |c| c.value.clone())))
}

/// `pool import -l`: the daemon loaded the keys kept in files; ask for the
/// prompted ones of `pool`, then mount what they opened.
pub(crate) fn after_import(socket: &Path, pool: &str) -> Result<i32, Failure> {
    let waiting: Vec<String> = roots(socket, vec![pool.to_string()], true, false)?.into_iter().filter(|r| !r.loaded).map(|r| r.name).collect();
    if waiting.is_empty() {
        return Ok(0);
    }
    let code = load_key(socket, waiting, false, false, false, None).or_else(|f| {
        eprintln!("tarn: {}", f.message);
        Ok::<i32, Failure>(1)
    })?;
    send(socket, &Request::MountAll)?;
    Ok(code)
}
