//! `tarn share`, `tarn unshare` (as zfs share/unshare, plus `share -l`:
//! what is shared, over which protocol, and to whom) and `tarn smb user`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use serde_json::json;
use tarn_daemon::proto::Request;
use tarn_daemon::shares::ShareRow;

use crate::cli::{SmbCommand, SmbUserCommand};
use crate::commands::{data, print_json, send};
use crate::Failure;

pub fn share(
    socket: &Path,
    all: bool,
    list: bool,
    json: bool,
    scripted: bool,
    dataset: Option<String>,
) -> Result<i32, Failure> {
    if !list {
        send(socket, &Request::Share { dataset: if all { None } else { dataset } })?;
        return Ok(0);
    }
    let rows: Vec<ShareRow> = data(send(socket, &Request::ShareList)?)?;
    if json {
        print_json(&json!({ "shares": rows }));
        return Ok(0);
    }
    print!("{}", list_text(&rows, scripted));
    Ok(0)
}

pub fn list_text(rows: &[ShareRow], scripted: bool) -> String {
    let headers: Vec<String> =
        ["DATASET", "PROTOCOL", "SHARE", "MOUNTPOINT", "ACCESS", "CLIENTS"].iter().map(|h| h.to_string()).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let access = if r.protocol == "smb" {
                if r.read_only { "ro" } else { "rw" }.to_string()
            } else {
                "-".to_string() // per client: see CLIENTS
            };
            vec![r.dataset.clone(), r.protocol.clone(), r.share.clone(), r.mountpoint.clone(), access, r.clients.clone()]
        })
        .collect();
    crate::output::table(&headers, &cells, scripted)
}

pub fn unshare(socket: &Path, target: Option<String>) -> Result<i32, Failure> {
    let target = target.map(|t| if t.starts_with(['/', '.']) { crate::up::absolute(Path::new(&t)).display().to_string() } else { t });
    send(socket, &Request::Unshare { target })?;
    Ok(0)
}

/// A password from stdin (`--password-stdin`: its first line), or asked
/// twice on the terminal without echo.
fn read_password(from_stdin: bool) -> Result<String, Failure> {
    let stdin = std::io::stdin();
    if from_stdin || !stdin.is_terminal() {
        let mut line = String::new();
        stdin.lock().read_line(&mut line).map_err(|e| format!("cannot read the password: {e}"))?;
        let password = line.trim_end_matches(['\n', '\r']).to_string();
        if password.is_empty() {
            return Err("an empty password was given".to_string().into());
        }
        return Ok(password);
    }
    let first = prompt("New SMB password: ")?;
    let second = prompt("Retype new SMB password: ")?;
    if first != second {
        return Err("the passwords do not match".to_string().into());
    }
    if first.is_empty() {
        return Err("an empty password was given".to_string().into());
    }
    Ok(first)
}

pub(crate) fn prompt(text: &str) -> Result<String, Failure> {
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
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if have_tty {
        // SAFETY: restoring the settings read above.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &saved) };
        eprintln!();
    }
    read.map_err(|e| format!("cannot read the password: {e}"))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}

pub fn smb(socket: &Path, command: SmbCommand) -> Result<i32, Failure> {
    let SmbCommand::User(command) = command;
    match command {
        SmbUserCommand::Add { password_stdin, user } => {
            let password = read_password(password_stdin)?;
            send(socket, &Request::SmbUser { action: "add".into(), user: Some(user), password: Some(password) })?;
        }
        SmbUserCommand::Remove { user } => {
            send(socket, &Request::SmbUser { action: "remove".into(), user: Some(user), password: None })?;
        }
        SmbUserCommand::List { json } => {
            let users: Vec<String> =
                data(send(socket, &Request::SmbUser { action: "list".into(), user: None, password: None })?)?;
            if json {
                print_json(&json!({ "users": users }));
            } else {
                for user in users {
                    println!("{user}");
                }
            }
        }
    }
    Ok(0)
}
