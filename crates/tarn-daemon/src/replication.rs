//! `send` and `recv`: the daemon writes (reads) the stream through the file
//! descriptor the CLI passed with the request (`fdpass`), so bulk data never
//! goes through the socket.
//!
//! A receive marks its target datasets busy and unmounts them, applies the
//! stream without the pool table locked (other commands go on), then mounts
//! what it created or changed — except a dataset left holding a partial
//! stream (`recv -s`), which stays unmounted until resumed or aborted.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use serde_json::json;
use tarn_ds::replication::{self, RecvSpec, SendSpec};
use tarn_ds::size::format_bytes;

use crate::daemon::{mount_dataset, pool_of, unmount_for_rollback, Daemon};
use crate::proto::{Request, Response};

type HandlerResult = Result<Response, String>;

/// Where a received dataset goes: the target itself, or (`recv -d`) the
/// target plus the sent name without its pool, or (`recv -e`) plus its
/// last component.
enum NameFrom {
    Target,
    DropPool,
    LastComponent,
}

/// A passed descriptor, read or written only while the client that passed
/// it is still connected: when it goes away the transfer fails (a receive
/// is undone or, with `-s`, keeps its partial state) instead of running on.
struct Watched {
    file: File,
    client: RawFd,
}

impl Watched {
    fn is_terminal(&self) -> bool {
        // SAFETY: isatty only inspects the descriptor.
        unsafe { libc::isatty(self.file.as_raw_fd()) == 1 }
    }

    /// Waits until the file is ready for `events`; fails if the client
    /// hung up first.
    fn ready(&self, events: libc::c_short) -> std::io::Result<()> {
        let mut fds = [
            libc::pollfd { fd: self.file.as_raw_fd(), events, revents: 0 },
            libc::pollfd { fd: self.client, events: libc::POLLRDHUP, revents: 0 },
        ];
        loop {
            // SAFETY: two valid pollfd entries.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if fds[1].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the tarn command went away"));
            }
            if fds[0].revents != 0 {
                return Ok(());
            }
        }
    }
}

impl std::io::Read for Watched {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.ready(libc::POLLIN)?;
        self.file.read(buf)
    }
}

impl Write for Watched {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.ready(libc::POLLOUT)?;
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Daemon {
    /// Like [`Daemon::handle`], for a request that came with descriptors.
    /// `client` is the requesting connection: a transfer stops when it
    /// goes away (the `tarn send`/`recv` process was killed).
    pub fn handle_with_fds(&self, request: Request, fds: Vec<OwnedFd>, client: RawFd) -> Response {
        let fd = fds.into_iter().next().map(|f| Watched { file: File::from(f), client });
        let result = match request {
            Request::Send { snapshot, from, series, recursive, props, token, dry_run, raw } => {
                let spec = SendSpec { snapshot, from, series, recursive, props, raw };
                self.check_encrypted_send(&spec, token.is_some()).and_then(|()| self.send(spec, token, dry_run, fd))
            }
            Request::Receive { target, force, resumable, set, exclude, no_mount, discard_pool, last_component } => {
                let spec = RecvSpec { target, force, resumable, set, exclude, spool_dir: Some(self.state_dir.clone()), prunable: None };
                let name_from = if discard_pool {
                    NameFrom::DropPool
                } else if last_component {
                    NameFrom::LastComponent
                } else {
                    NameFrom::Target
                };
                self.receive(spec, no_mount, name_from, fd)
            }
            Request::ReceiveAbort { dataset } => self.receive_abort(&dataset),
            other => return self.handle(other),
        };
        // A receive creates and mounts datasets: shares and NBD exports
        // follow at once, not at the next periodic refresh.
        self.refresh_shares();
        result.unwrap_or_else(Response::error)
    }

    /// An encrypted dataset is sent raw with `-w` (and with `-R`, which
    /// implies it for encrypted datasets), else as plaintext with its key
    /// loaded (as zfs); with `-p` only raw (zfs sends encrypted datasets
    /// with properties only raw). Nothing is sent when refused.
    fn check_encrypted_send(&self, spec: &SendSpec, resuming: bool) -> Result<(), String> {
        if resuming || spec.raw || spec.recursive || !spec.props {
            return Ok(());
        }
        let Some(ds) = self.pool_ds(pool_of(&spec.snapshot)) else { return Ok(()) };
        let dataset = spec.snapshot.split('@').next().unwrap_or_default();
        if ds.encryption_root(dataset).is_some() {
            return Err(format!("cannot send '{}': '{dataset}' is encrypted: with -p it is sent only raw (add -w)", spec.snapshot));
        }
        Ok(())
    }

    fn pool_ds(&self, pool: &str) -> Option<Arc<tarn_ds::Pool>> {
        self.pools.lock().get(pool).map(|p| p.ds.clone())
    }

    fn send(&self, spec: SendSpec, token: Option<String>, dry_run: bool, fd: Option<Watched>) -> HandlerResult {
        let what = token.as_ref().map_or_else(|| spec.snapshot.clone(), |_| "resume token".to_string());
        let fail = |why: String| format!("cannot send '{what}': {why}");
        let snapshot = match &token {
            Some(t) => replication::token_snapshot(t).map_err(|e| fail(e.to_string()))?,
            None => spec.snapshot.clone(),
        };
        let pool = pool_of(&snapshot).to_string();
        let ds = self.pool_ds(&pool).ok_or_else(|| fail(format!("no such pool '{pool}'")))?;
        let plan = match &token {
            Some(t) => ds.send_plan_resume(t),
            None => ds.send_plan(&spec),
        }
        .map_err(|e| match e {
            tarn_ds::DsError::NotFound(n) => fail(format!("'{n}' does not exist")),
            other => fail(other.to_string()),
        })?;
        if dry_run {
            let estimates = ds.send_estimate(&plan).map_err(|e| fail(e.to_string()))?;
            let mut text = String::new();
            let mut parsable = String::new();
            let mut total = 0;
            for e in &estimates {
                let last = e.snapshots.last().cloned().unwrap_or_default();
                let kind = match &e.from {
                    Some(f) => format!("incremental send of {}@{last} from {f}", e.dataset),
                    None => format!("full send of {}@{last}", e.dataset),
                };
                let series = if e.snapshots.len() > 1 { format!(" ({} snapshots)", e.snapshots.len()) } else { String::new() };
                text.push_str(&format!("{kind}{series} estimated size is {}\n", format_bytes(e.bytes)));
                match &e.from {
                    Some(f) => parsable.push_str(&format!("incremental\t{f}\t{}@{last}\t{}\n", e.dataset, e.bytes)),
                    None => parsable.push_str(&format!("full\t{}@{last}\t{}\n", e.dataset, e.bytes)),
                }
                total += e.bytes;
            }
            text.push_str(&format!("total estimated size is {}\n", format_bytes(total)));
            parsable.push_str(&format!("size\t{total}\n"));
            let data = json!({ "estimates": estimates, "total": total, "text": text, "parsable": parsable });
            return Ok(Response::data(data));
        }
        // A dataset sent as plaintext needs its key: refused before a
        // byte is written (a partial stream left in a file misleads).
        for d in plan.header.datasets.iter().filter(|d| d.crypt.is_none()) {
            let full = if d.name.is_empty() { plan.header.source.clone() } else { format!("{}/{}", plan.header.source, d.name) };
            if !ds.key_available(&full) {
                return Err(fail(format!("encryption key not loaded for '{full}' (load-key, or send it raw with -w)")));
            }
        }
        let fd = fd.ok_or_else(|| fail("no output descriptor came with the request".into()))?;
        if fd.is_terminal() {
            return Err(fail("refusing to write a stream to a terminal (redirect it to a file or a pipe)".into()));
        }
        let mut out = BufWriter::with_capacity(1 << 20, fd);
        let bytes = ds.send_package(&plan, &mut out).map_err(|e| fail(e.to_string()))?;
        out.flush().map_err(|e| fail(format!("cannot write the stream: {e}")))?;
        Ok(Response::data(json!({ "bytes": bytes })))
    }

    fn receive(&self, mut spec: RecvSpec, no_mount: bool, name_from: NameFrom, fd: Option<Watched>) -> HandlerResult {
        let target = spec.target.clone();
        let fail = |why: String| format!("cannot receive into '{target}': {why}");
        tarn_ds::validate_dataset_name(&target).map_err(|e| fail(e.to_string()))?;
        for (k, v) in &spec.set {
            tarn_ds::props::validate(k, v).map_err(|e| fail(e.to_string()))?;
        }
        for x in &spec.exclude {
            tarn_ds::props::check_name(x).map_err(|e| fail(e.to_string()))?;
        }
        let pool = pool_of(&target).to_string();
        let fd = fd.ok_or_else(|| fail("no input descriptor came with the request".into()))?;
        if fd.is_terminal() {
            return Err(fail("refusing to read a stream from a terminal".into()));
        }
        if self.pool_ds(&pool).is_none() {
            return Err(fail(format!("no such pool '{pool}'")));
        }
        let mut input = BufReader::with_capacity(1 << 20, fd);
        let header = replication::read_header(&mut input).map_err(|e| fail(e.to_string()))?;
        // -d / -e: the sent dataset's name (without its pool / its last
        // component) goes below the target; missing parents are created.
        let tail = match name_from {
            NameFrom::Target => None,
            NameFrom::DropPool => header.source.split_once('/').map(|(_, rest)| rest.to_string()),
            NameFrom::LastComponent => header.source.rsplit('/').next().map(str::to_string),
        };
        let target = match tail.filter(|t| !t.is_empty()) {
            Some(t) => {
                let full = format!("{target}/{t}");
                tarn_ds::validate_dataset_name(&full).map_err(|e| fail(e.to_string()))?;
                if let Some(parent) = tarn_ds::props::parent_name(&full).filter(|p| *p != target) {
                    let mut pools = self.pools.lock();
                    let imported = pools.get_mut(&pool).ok_or_else(|| fail(format!("no such pool '{pool}'")))?;
                    if !imported.ds.exists(parent) {
                        let made = imported.ds.create_dataset(parent, &[], true, &crate::mount::format).map_err(|e| fail(e.to_string()))?;
                        for name in &made {
                            let _ = mount_dataset(imported, name);
                        }
                    }
                }
                full
            }
            None => target.clone(),
        };
        spec.target = target.clone();
        let fail = |why: String| format!("cannot receive into '{target}': {why}");
        // Claim the targets: busy and unmounted.
        let (ds, targets, unmounted) = {
            let mut pools = self.pools.lock();
            let imported = pools.get_mut(&pool).ok_or_else(|| fail(format!("no such pool '{pool}'")))?;
            let mut targets = imported.ds.receive_targets(&header, &target).map_err(|e| fail(e.to_string()))?;
            // `-R -F`: what the sender no longer has is destroyed after the
            // package: unmounted and claimed with the targets.
            let prunes = imported.ds.receive_prunes(&header, &target, spec.force);
            targets.extend(prunes.iter().cloned());
            spec.prunable = Some(prunes);
            targets.sort();
            targets.dedup();
            if let Some(busy) = targets.iter().find(|t| imported.busy.contains(*t)) {
                return Err(fail(format!("'{busy}' is busy (a rollback or receive is in progress)")));
            }
            let mut unmounted = Vec::new();
            for t in &targets {
                match unmount_for_rollback(imported, t, false) {
                    Ok(names) => unmounted.extend(names),
                    Err(e) => {
                        for name in unmounted.iter().rev() {
                            let _ = mount_dataset(imported, name);
                        }
                        return Err(fail(e));
                    }
                }
            }
            for t in &targets {
                imported.busy.insert(t.clone());
            }
            (imported.ds.clone(), targets, unmounted)
        };
        let result = ds.receive_package(&spec, &header, &mut input);
        let mut warnings = String::new();
        {
            let mut pools = self.pools.lock();
            if let Some(imported) = pools.get_mut(&pool).filter(|p| Arc::ptr_eq(&p.ds, &ds)) {
                for t in &targets {
                    imported.busy.remove(t);
                }
                let mut to_mount: Vec<String> = unmounted.clone();
                if !no_mount {
                    to_mount.extend(targets.iter().filter(|t| imported.ds.exists(t)).cloned());
                }
                to_mount.sort();
                to_mount.dedup();
                // Received raw with its key not loaded here: not mounted
                // (load-key, then mount), as zfs.
                to_mount.retain(|n| imported.ds.exists(n) && !imported.mounts.contains_key(n) && imported.ds.key_available(n));
                for name in &to_mount {
                    if let Err(e) = mount_dataset(imported, name) {
                        warnings.push_str(&format!("tarn: received, but cannot mount '{name}': {e}\n"));
                    }
                }
            }
        }
        let report = result.map_err(|e| match e {
            tarn_ds::DsError::RecvInterrupted { .. } => e.to_string(),
            tarn_ds::DsError::Recv(m) if m.starts_with("cannot receive") => m,
            other => fail(other.to_string()),
        })?;
        for w in &report.warnings {
            warnings.push_str(&format!("tarn: {w}\n"));
        }
        let exit = if warnings.contains("cannot mount") { 1 } else { 0 };
        Ok(Response { stderr: warnings, exit, data: Some(json!(report)), ..Response::text("") })
    }

    fn receive_abort(&self, dataset: &str) -> HandlerResult {
        let fail = |why: String| format!("cannot abort the receive into '{dataset}': {why}");
        let pool = pool_of(dataset).to_string();
        let ds = {
            let mut pools = self.pools.lock();
            let imported = pools.get_mut(&pool).ok_or_else(|| fail(format!("no such pool '{pool}'")))?;
            if imported.busy.contains(dataset) {
                return Err(fail("dataset is busy (a receive is in progress)".into()));
            }
            imported.busy.insert(dataset.to_string());
            imported.ds.clone()
        };
        let result = ds.abort_receive(dataset);
        let mut warnings = String::new();
        {
            let mut pools = self.pools.lock();
            if let Some(imported) = pools.get_mut(&pool).filter(|p| Arc::ptr_eq(&p.ds, &ds)) {
                imported.busy.remove(dataset);
                if result.is_ok() && imported.ds.exists(dataset) {
                    if let Err(e) = mount_dataset(imported, dataset) {
                        warnings.push_str(&format!("tarn: cannot mount '{dataset}': {e}\n"));
                    }
                }
            }
        }
        result.map_err(|e| fail(e.to_string()))?;
        Ok(Response { stderr: warnings, ..Response::text("") })
    }
}
