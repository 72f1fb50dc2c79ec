//! `tarn smb user add|remove|list`: Samba passwords of existing system
//! users, kept in the passdb under the daemon's smb private dir (pdbedit
//! against the daemon's own smb.conf, never the system's).

use std::io::Write;
use std::process::{Command, Stdio};

use crate::daemon::Daemon;
use crate::proto::Response;
use crate::smbd::{find_program, missing_samba};

fn system_user_exists(user: &str) -> bool {
    let Ok(name) = std::ffi::CString::new(user) else { return false };
    // SAFETY: getpwnam with a valid C string; only the pointer is tested.
    !unsafe { libc::getpwnam(name.as_ptr()) }.is_null()
}

impl Daemon {
    pub(crate) fn smb_user(&self, action: &str, user: Option<&str>, password: Option<&str>) -> Result<Response, String> {
        let smbd = self
            .shares
            .smbd()
            .ok_or("SMB is not enabled: set [smb] enable = true in the daemon config")?;
        let pdbedit = find_program("pdbedit", None).ok_or_else(|| missing_samba("pdbedit"))?;
        let mut command = Command::new(pdbedit);
        command.arg("-s").arg(smbd.config_path());
        match (action, user) {
            ("list", _) => {
                let out = command.arg("-L").output().map_err(|e| format!("pdbedit: {e}"))?;
                if !out.status.success() {
                    return Err(format!("pdbedit -L failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
                }
                let users: Vec<String> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| l.split(':').next())
                    .filter(|u| !u.is_empty())
                    .map(str::to_string)
                    .collect();
                Ok(Response::data(serde_json::json!(users)))
            }
            ("add", Some(user)) => {
                if !system_user_exists(user) {
                    return Err(format!("cannot add SMB user '{user}': no such system user"));
                }
                let password = password.ok_or("a password is needed")?;
                if password.contains(['\n', '\0']) {
                    return Err("the password must not hold a line break".into());
                }
                let mut child = command
                    .args(["-a", "-t", "-u", user])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("pdbedit: {e}"))?;
                if let Some(mut stdin) = child.stdin.take() {
                    let _ = write!(stdin, "{password}\n{password}\n");
                }
                let out = child.wait_with_output().map_err(|e| format!("pdbedit: {e}"))?;
                if !out.status.success() {
                    let why = String::from_utf8_lossy(&out.stderr);
                    let why = why.lines().last().unwrap_or("failed").trim();
                    return Err(format!("cannot add SMB user '{user}': {why}"));
                }
                Ok(Response::text(""))
            }
            ("remove", Some(user)) => {
                let out = command.args(["-x", "-u", user]).output().map_err(|e| format!("pdbedit: {e}"))?;
                if !out.status.success() {
                    return Err(format!("cannot remove SMB user '{user}': no such SMB user"));
                }
                Ok(Response::text(""))
            }
            _ => Err(format!("bad smb user action '{action}'")),
        }
    }
}
