//! Pool history: what the daemon records of each command that changed a
//! pool (`zpool history`), and the `pool history` handler.
//!
//! Every request goes through [`Daemon::handle_logged`]. A request that
//! changes a pool and succeeds leaves, in that pool's history (kept in the
//! pool, `tarn_ds::history`), its internal events — what the daemon applied,
//! with the txg: datasets, snapshots and bookmarks created (their creation
//! txg) or destroyed, properties set, rollbacks, scrubs, device changes —
//! followed by one command record: the command line the CLI sent with the
//! request (`argv`, with the CLI's own `--socket` option left out), who
//! sent it (the uid of the socket's peer, from `SO_PEERCRED`, not from the
//! client's word) and this host's name. A request without `argv` (not from
//! the CLI) leaves its internal events only.
//!
//! As in ZFS, `pool export` is recorded before the export is tried (the
//! export writes it out with its final txg), and failed commands, reads
//! (`list`, `status`, `send`, ...) and `pool destroy` are not recorded.
//! Events for what was destroyed carry the txg synced when the command
//! returned (each change is synced before its command answers).

use std::collections::BTreeMap;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;

use tarn_ds::history::HistoryRecord;

use crate::daemon::{hostname, pool_of, Daemon};
use crate::proto::{PoolHistoryData, Request, Response};

type HandlerResult = Result<Response, String>;

/// Longest command line recorded (longer ones are cut).
const COMMAND_MAX: usize = 4096;

/// Who sent a request, as the server saw it.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub argv: Option<Vec<String>>,
    pub uid: Option<u32>,
}

/// The uid of the process at the other end of a Unix socket.
pub fn peer_uid(fd: RawFd) -> Option<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
    };
    (rc == 0).then_some(cred.uid)
}

/// The login name of `uid`, if it has one.
fn user_name(uid: u32) -> Option<String> {
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0u8; 4096];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r fills `pwd` with pointers into `buf`, which
    // outlives their use below.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name is a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// `uts NODENAME RELEASE VERSION MACHINE`, as ZFS records it.
fn uts() -> String {
    // SAFETY: uname fills a zeroed utsname with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return "uts unknown".into();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!("uts {} {} {} {}", field(&u.nodename), field(&u.release), field(&u.version), field(&u.machine))
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The command line to record: `tarn` and the arguments, without the
/// CLI's `--socket PATH` (plumbing, not part of the command).
pub fn command_line(argv: &[String]) -> String {
    let mut words = vec!["tarn".to_string()];
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--socket" {
            args.next();
            continue;
        }
        if arg.starts_with("--socket=") {
            continue;
        }
        words.push(arg.clone());
    }
    let mut line = words.join(" ");
    if line.len() > COMMAND_MAX {
        let mut cut = COMMAND_MAX;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    line
}

/// What a request does to the history.
enum Plan {
    /// Not recorded.
    None,
    /// Recorded in the named pool.
    Pool(String),
    /// An import: recorded in the pool that appears.
    Import,
}

fn plan(request: &Request) -> Plan {
    let pool = |name: &str| Plan::Pool(pool_of(name).to_string());
    match request {
        Request::PoolCreate { pool, dry_run: false, .. } => Plan::Pool(pool.clone()),
        Request::PoolImport { pool: Some(_), .. } => Plan::Import,
        Request::PoolExport { pool, .. }
        | Request::PoolSet { pool, .. }
        | Request::PoolScrub { pool, .. }
        | Request::PoolOffline { pool, .. }
        | Request::PoolOnline { pool, .. }
        | Request::PoolReplace { pool, .. }
        | Request::PoolAttach { pool, .. }
        | Request::PoolDetach { pool, .. }
        | Request::PoolRemove { pool, .. }
        | Request::PoolClear { pool, .. } => Plan::Pool(pool.clone()),
        Request::PoolAdd { pool, dry_run: false, .. } => Plan::Pool(pool.clone()),
        Request::Create { dataset, .. } | Request::Set { dataset, .. } | Request::Promote { dataset } | Request::ChangeKey { dataset, .. } => pool(dataset),
        Request::Destroy { dataset, dry_run: false, .. } => pool(dataset),
        Request::Snapshot { names, .. } => names.first().map_or(Plan::None, |n| pool(n)),
        Request::Bookmark { source, .. } => pool(source),
        Request::Rollback { snapshot, .. } => pool(snapshot),
        Request::Clone { target, .. } => pool(target),
        Request::Hold { snapshots, .. } => snapshots.first().map_or(Plan::None, |n| pool(n)),
        Request::Receive { target, .. } => pool(target),
        Request::ReceiveAbort { dataset } => pool(dataset),
        _ => Plan::None,
    }
}

/// Datasets, snapshots and bookmarks of a pool: name → (object set id,
/// creation txg). A bookmark carries its dataset's object set id.
type Catalog = BTreeMap<String, (u64, u64)>;

fn catalog(ds: &tarn_ds::Pool) -> Catalog {
    let mut out = Catalog::new();
    for name in ds.list() {
        if let Ok(r) = ds.record(&name) {
            out.insert(name, (r.objset, r.createtxg));
        }
    }
    for name in ds.snapshots(None) {
        if let Ok(r) = ds.snapshot_record(&name) {
            out.insert(name, (r.objset, r.createtxg));
        }
    }
    for name in ds.bookmarks(None) {
        let objset = name.split('#').next().and_then(|d| ds.record(d).ok()).map_or(0, |r| r.objset);
        if let Ok(r) = ds.bookmark_record(&name) {
            out.insert(name, (objset, r.createtxg));
        }
    }
    out
}

fn internal(txg: u64, event: &str, dataset: Option<(&str, u64)>, detail: String) -> HistoryRecord {
    HistoryRecord {
        time: now(),
        txg: Some(txg),
        event: Some(event.to_string()),
        dataset: dataset.map(|(n, _)| n.to_string()),
        dsid: dataset.map(|(_, id)| id),
        detail: Some(detail),
        host: Some(hostname()),
        ..Default::default()
    }
}

fn software() -> String {
    format!("pool version 1; software version tarn-{}; {}", env!("CARGO_PKG_VERSION"), uts())
}

/// The internal events of a request that succeeded: `before` and `after`
/// are the pool's catalog around it, `txg` the txg synced after it.
fn internal_events(request: &Request, before: &Catalog, after: &Catalog, txg: u64) -> Vec<HistoryRecord> {
    let mut out = Vec::new();
    let id_of = |name: &str| after.get(name).or_else(|| before.get(name)).map_or(0, |e| e.0);
    match request {
        Request::PoolCreate { .. } => {
            let first = after.values().map(|e| e.1).min().unwrap_or(txg);
            out.push(internal(first, "create", None, software()));
        }
        Request::PoolImport { .. } => out.push(internal(txg, "import", None, software())),
        _ => {}
    }
    for (name, (objset, createtxg)) in after.iter().filter(|(n, _)| !before.contains_key(*n)) {
        let (event, detail) = match request {
            Request::Clone { snapshot, .. } if !name.contains(['@', '#']) => {
                ("clone", format!("origin={snapshot} ({})", id_of(snapshot)))
            }
            Request::Receive { .. } => ("receive", String::new()),
            _ if name.contains('@') => ("snapshot", String::new()),
            _ if name.contains('#') => ("bookmark", String::new()),
            _ => ("create", String::new()),
        };
        out.push(internal(*createtxg, event, Some((name, *objset)), detail));
    }
    for (name, (objset, _)) in before.iter().filter(|(n, _)| !after.contains_key(*n)) {
        out.push(internal(txg, "destroy", Some((name, *objset)), String::new()));
    }
    let ds_event = |event: &str, name: &str, detail: String| internal(txg, event, Some((name, id_of(name))), detail);
    match request {
        Request::Set { assignments, dataset, .. } => {
            for (prop, value) in assignments {
                out.push(ds_event("set", dataset, format!("{prop}={value}")));
            }
        }
        Request::PoolSet { prop, value, .. } => out.push(internal(txg, "set", None, format!("{prop}={value}"))),
        Request::Rollback { snapshot, .. } => {
            let dataset = snapshot.split('@').next().unwrap_or_default();
            out.push(ds_event("rollback", dataset, format!("to={snapshot}")));
        }
        Request::Promote { dataset } => out.push(ds_event("promote", dataset, String::new())),
        Request::Hold { tag, snapshots, release, .. } => {
            let event = if *release { "release" } else { "hold" };
            for name in snapshots {
                out.push(ds_event(event, name, format!("tag={tag}")));
            }
        }
        Request::PoolScrub { pause, stop, .. } => {
            let (event, detail) = if *stop {
                ("scan cancelled", String::new())
            } else if *pause {
                ("scan paused", String::new())
            } else {
                ("scan setup", format!("func=scrub mintxg=0 maxtxg={txg}"))
            };
            out.push(internal(txg, event, None, detail));
        }
        Request::PoolOffline { device, .. } => out.push(internal(txg, "vdev", None, format!("offline vdev={device}"))),
        Request::PoolOnline { device, .. } => out.push(internal(txg, "vdev", None, format!("online vdev={device}"))),
        Request::PoolReplace { old, new, .. } => {
            let new = new.as_deref().unwrap_or(old);
            out.push(internal(txg, "vdev attach", None, format!("replace vdev={new} for vdev={old}")));
        }
        Request::PoolAttach { existing, new, .. } => {
            out.push(internal(txg, "vdev attach", None, format!("attach vdev={new} to vdev={existing}")))
        }
        Request::PoolDetach { device, .. } => out.push(internal(txg, "detach", None, format!("vdev={device}"))),
        Request::PoolAdd { vdevs, spares, cache, .. } => {
            let mut what: Vec<String> = vdevs
                .iter()
                .map(|g| format!("{}{}({})", if g.log { "log " } else { "" }, crate::daemon::describe_group(g), g.devices.join(",")))
                .collect();
            what.extend(spares.iter().map(|s| format!("spare({s})")));
            what.extend(cache.iter().map(|c| format!("cache({c})")));
            out.push(internal(txg, "vdev add", None, what.join(" ")));
        }
        Request::PoolRemove { device, .. } => out.push(internal(txg, "vdev remove", None, format!("vdev={device}"))),
        Request::PoolClear { device, .. } => {
            out.push(internal(txg, "clear", None, device.as_ref().map(|d| format!("vdev={d}")).unwrap_or_default()))
        }
        _ => {}
    }
    out
}

impl Daemon {
    fn history_pool(&self, name: &str) -> Option<Arc<tarn_ds::Pool>> {
        self.pools.lock().get(name).map(|p| p.ds.clone())
    }

    fn command_record(caller: &Caller) -> Option<HistoryRecord> {
        let argv = caller.argv.as_ref()?;
        Some(HistoryRecord {
            time: now(),
            command: Some(command_line(argv)),
            who: caller.uid,
            user: caller.uid.and_then(user_name),
            host: Some(hostname()),
            zone: Some("linux".into()),
            ..Default::default()
        })
    }

    fn append_history(ds: &tarn_ds::Pool, records: &[HistoryRecord], first: bool) {
        if let Err(e) = ds.history_append(records, first) {
            eprintln!("tarn daemon: cannot record pool history of '{}': {e}", ds.name());
        }
    }

    /// Handles a request and records it in the history of the pool it
    /// changed (see the module docs).
    pub fn handle_logged(&self, request: Request, caller: Caller, fds: Vec<OwnedFd>, client: RawFd) -> Response {
        let plan = plan(&request);
        let (target, before) = match &plan {
            Plan::None => return self.handle_with_fds(request, fds, client),
            Plan::Pool(name) => {
                let ds = self.history_pool(name);
                let before = ds.as_deref().map(catalog).unwrap_or_default();
                (ds, before)
            }
            Plan::Import => (None, Catalog::new()),
        };
        if let (Request::PoolExport { .. }, Some(ds)) = (&request, &target) {
            // Recorded first: the export's final txg writes it out.
            if let Some(record) = Self::command_record(&caller) {
                Self::append_history(ds, &[record], false);
            }
            return self.handle_with_fds(request, fds, client);
        }
        let pools_before: Vec<String> = self.pools.lock().keys().cloned().collect();
        let logged = request.clone();
        let response = self.handle_with_fds(request, fds, client);
        if !response.ok {
            return response;
        }
        let ds = match &plan {
            Plan::Pool(name) => self.history_pool(name),
            _ => {
                let pools = self.pools.lock();
                pools.iter().find(|(n, _)| !pools_before.contains(n)).map(|(_, p)| p.ds.clone())
            }
        };
        let Some(ds) = ds else { return response };
        // A pool replaced meanwhile (clear of a suspended pool imports it
        // again) is still the same pool on disk.
        let after = catalog(&ds);
        // An import creates nothing: what it finds was there before.
        let before = if matches!(plan, Plan::Import) { after.clone() } else { before };
        let txg = ds.obj().last_synced_txg();
        let mut records = internal_events(&logged, &before, &after, txg);
        records.extend(Self::command_record(&caller));
        let first = matches!(logged, Request::PoolCreate { .. });
        Self::append_history(&ds, &records, first);
        response
    }

    pub(crate) fn pool_history(&self, names: &[String]) -> HandlerResult {
        let selected: Vec<(String, Arc<tarn_ds::Pool>)> = {
            let pools = self.pools.lock();
            Self::selected_pools(&pools, names)?.into_iter().map(|(n, p)| (n.clone(), p.ds.clone())).collect()
        };
        let mut out = Vec::new();
        for (name, ds) in selected {
            let history = ds.history().map_err(|e| format!("cannot get history for '{name}': {e}"))?;
            out.push(PoolHistoryData { name, records: history.records, dropped: history.dropped });
        }
        Ok(Response::data(serde_json::to_value(out).map_err(|e| e.to_string())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_leave_out_the_socket_option() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(command_line(&argv("/usr/bin/tarn --socket /tmp/s snapshot tank@a")), "tarn snapshot tank@a");
        assert_eq!(command_line(&argv("tarn pool create --socket=/s tank /d0")), "tarn pool create tank /d0");
        assert_eq!(command_line(&argv("tarn")), "tarn");
        let long = format!("tarn set comment={} tank", "é".repeat(5000));
        assert!(command_line(&argv(&long)).len() <= COMMAND_MAX);
    }

    #[test]
    fn argv_rides_beside_any_request() {
        let line = crate::proto::request_line(&Request::Ping, Some(&["tarn".to_string(), "x".to_string()])).unwrap();
        let (request, argv) = crate::proto::parse_request_line(&line).unwrap();
        assert!(matches!(request, Request::Ping));
        assert_eq!(argv, Some(vec!["tarn".to_string(), "x".to_string()]));
        let plain = serde_json::to_string(&Request::PoolHistory { pools: vec!["tank".into()] }).unwrap();
        let (request, argv) = crate::proto::parse_request_line(&plain).unwrap();
        assert!(matches!(request, Request::PoolHistory { .. }) && argv.is_none());
        assert!(crate::proto::parse_request_line(r#"{"cmd":"ping","argv":"not a list"}"#).is_err());
        // A daemon that does not know `argv` (it reads the line as a bare
        // request) accepts such lines too.
        let argv = ["tarn".to_string(), "snapshot".to_string(), "tank@a".to_string()];
        for request in [Request::Ping, Request::Snapshot { names: vec!["tank@a".into()], recursive: false }] {
            let line = crate::proto::request_line(&request, Some(&argv)).unwrap();
            assert!(line.contains("\"argv\""), "{line}");
            serde_json::from_str::<Request>(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }
}
