//! Turning parsed command lines into daemon requests and responses into
//! output.

use std::path::Path;

use tarn_daemon::proto::{AlertTestRow, DatasetRow, HoldRow, PoolRow, PoolStatusData, Request, Response};
use tarn_ds::props;

use crate::cli::{AlertCommand, Cli, Command, DebugCommand, PoolCommand};
use crate::up::absolute;
use crate::clock::Zone;
use crate::{client, devices, events, output, status, up, vdevspec, Failure};

fn path_string(path: &Path) -> String {
    absolute(path).to_string_lossy().into_owned()
}

/// A device as zpool takes it: a full path, or a name under /dev
/// (`sdb`, `disk/by-id/...`). A relative path is refused, as zpool does:
/// what it names would depend on the directory the command ran in.
pub(crate) fn resolve_device(name: &str) -> Result<String, String> {
    if name.starts_with('/') {
        return Ok(name.to_string());
    }
    let under_dev = Path::new("/dev").join(name);
    if !name.starts_with('.') && under_dev.exists() {
        return Ok(under_dev.to_string_lossy().into_owned());
    }
    Err(format!("cannot open '{name}': must be a full path or shorthand device name"))
}

/// Exit status owed by a command that succeeded in part (e.g. a dataset
/// created but not mounted): its message is already on stderr.
pub static PARTIAL_FAILURE_EXIT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

pub(crate) fn send(socket: &Path, request: &Request) -> Result<Response, Failure> {
    send_with_fd(socket, request, None)
}

/// [`send`], passing `fd` with the request (`send`/`recv` streams).
pub(crate) fn send_with_fd(socket: &Path, request: &Request, fd: Option<std::os::fd::RawFd>) -> Result<Response, Failure> {
    let response = client::call_with_fd(socket, request, fd)?;
    print!("{}", response.stdout);
    eprint!("{}", response.stderr);
    if response.ok && response.exit != 0 {
        PARTIAL_FAILURE_EXIT.fetch_max(response.exit, std::sync::atomic::Ordering::Relaxed);
    }
    if !response.ok {
        return Err(Failure { message: response.error.unwrap_or_else(|| "failed".into()), exit: response.exit.max(1) });
    }
    Ok(response)
}

pub(crate) fn data<T: serde::de::DeserializeOwned>(response: Response) -> Result<T, Failure> {
    serde_json::from_value(response.data.unwrap_or_default())
        .map_err(|e| Failure::from(format!("bad answer from the daemon: {e}")))
}

pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

/// A property name's error as the command's failure: a name no ZFS would
/// take is bad usage (exit 2); a ZFS property tarn does not have yet, or a
/// malformed user property, is refused (exit 1). The same rule for `get`,
/// `list -o/-s`, `set`, `create -o` and `inherit`.
pub(crate) fn prop_failure(e: props::PropError) -> Failure {
    match e {
        props::PropError::Unknown(_) => Failure::usage(e.to_string()),
        other => Failure::from(other.to_string()),
    }
}

fn check_props(names: &[String]) -> Result<(), Failure> {
    for name in names {
        if name != "all" {
            props::check_name(name).map_err(prop_failure)?;
        }
    }
    Ok(())
}

fn canonical(prop: &str) -> String {
    props::canonical_name(prop)
}

/// `-s`/`-S` keys in command-line order: (property, descending).
fn sort_keys(ascending: Vec<String>, descending: Vec<String>) -> Vec<(String, bool)> {
    if ascending.is_empty() || descending.is_empty() {
        return ascending.into_iter().map(|p| (p, false)).chain(descending.into_iter().map(|p| (p, true))).collect();
    }
    // Both kinds: their order matters, and clap keeps them apart; take it
    // from the command line itself.
    let args: Vec<String> = std::env::args().collect();
    let mut keys = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let (flag, value) = match arg.as_str() {
            "-s" | "-S" => (arg.clone(), args.get(i + 1).cloned()),
            a if a.len() > 2 && (a.starts_with("-s") || a.starts_with("-S")) => (a[..2].to_string(), Some(a[2..].to_string())),
            _ => {
                i += 1;
                continue;
            }
        };
        if let Some(value) = value {
            keys.push((value, flag == "-S"));
        }
        i += if arg.len() == 2 { 2 } else { 1 };
    }
    keys
}

/// `get -o FIELD[,FIELD]...`: zfs's columns; `all` is every one.
const GET_FIELDS: [&str; 5] = ["name", "property", "value", "received", "source"];

fn get_fields(fields: Option<crate::cli::CommaList>) -> Result<Vec<String>, Failure> {
    let fields = fields.map(|f| f.0).unwrap_or_else(|| ["name", "property", "value", "source"].map(String::from).to_vec());
    let mut out = Vec::new();
    for field in &fields {
        match field.as_str() {
            "all" => out.extend(GET_FIELDS.map(String::from)),
            f if GET_FIELDS.contains(&f) => out.push(f.to_string()),
            _ => return Err(Failure::usage(format!("bad field '{field}' for -o (name, property, value, received, source, all)"))),
        }
    }
    Ok(out)
}

fn get_table(rows: Vec<(String, Vec<tarn_daemon::proto::PropCell>)>, fields: &[String], scripted: bool) -> String {
    let headers: Vec<String> = fields.iter().map(|f| f.to_ascii_uppercase()).collect();
    let mut lines = Vec::new();
    for (name, cells) in rows {
        for cell in cells {
            lines.push(
                fields
                    .iter()
                    .map(|f| match f.as_str() {
                        "name" => name.clone(),
                        "property" => cell.property.clone(),
                        "value" => cell.value.clone(),
                        "received" => cell.received.clone().unwrap_or_else(|| "-".to_string()),
                        _ => cell.source.clone(),
                    })
                    .collect(),
            );
        }
    }
    output::table(&headers, &lines, scripted)
}

/// `-t TYPE[,TYPE]...` as the daemon takes it: `filesystem`, `volume`,
/// `snapshot` and/or `bookmark`.
fn dataset_types(types: Option<crate::cli::CommaList>, default: &[&str]) -> Result<Vec<String>, Failure> {
    let Some(types) = types else { return Ok(default.iter().map(|t| t.to_string()).collect()) };
    let mut out: Vec<String> = Vec::new();
    for kind in &types.0 {
        let add: &[&str] = match kind.as_str() {
            "filesystem" | "fs" => &["filesystem"],
            "snapshot" | "snap" => &["snapshot"],
            "bookmark" => &["bookmark"],
            "all" => &["filesystem", "volume", "snapshot", "bookmark"],
            "volume" | "vol" => &["volume"],
            _ => return Err(Failure::usage(format!("invalid type '{kind}' (filesystem, snapshot, volume, bookmark, all)"))),
        };
        for t in add {
            if !out.iter().any(|o| o == t) {
                out.push(t.to_string());
            }
        }
    }
    Ok(out)
}

/// `tarn holds`: NAME TAG TIMESTAMP (hold times are not stored: `-`).
fn holds_table(rows: &[HoldRow], scripted: bool) -> String {
    let headers = ["NAME", "TAG", "TIMESTAMP"].map(String::from);
    let lines: Vec<Vec<String>> = rows.iter().map(|r| vec![r.name.clone(), r.tag.clone(), "-".to_string()]).collect();
    output::table(&headers, &lines, scripted)
}

pub fn run(cli: Cli) -> Result<i32, Failure> {
    let socket = client::socket_path(cli.socket.as_deref());
    match cli.command {
        Command::Daemon { state_dir, config } => {
            let options = tarn_daemon::DaemonOptions {
                state_dir: state_dir.map(|d| absolute(&d)).unwrap_or_else(tarn_daemon::default_state_dir),
                socket: cli.socket.map(|s| absolute(&s)),
                config,
            };
            tarn_daemon::run(options)?;
            Ok(0)
        }
        Command::Version => {
            println!("tarn {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        Command::Up { home } => up::up(home.as_deref()),
        Command::Down { home } => up::down(home.as_deref()),
        Command::Pool(command) => pool(&socket, command),
        Command::Create { parents, mut props, volsize, sparse, blocksize, dataset } => {
            // `-o volblocksize=` is `-b` (as zfs takes it).
            let mut blocksize = blocksize;
            if let Some(i) = props.iter().position(|(p, _)| p == "volblocksize") {
                let (_, value) = props.remove(i);
                if volsize.is_none() {
                    return Err(Failure::usage(format!("cannot create '{dataset}': volblocksize applies to volumes (-V) only")));
                }
                blocksize = Some(value);
            }
            for (prop, _) in &props {
                props::check_name(prop).map_err(prop_failure)?;
            }
            let volume = volsize.map(|size| tarn_daemon::proto::VolumeSpec { size, blocksize, sparse });
            let key = crate::keys::create_key(&dataset, &props)?;
            send(&socket, &Request::Create { dataset, parents, props, key, volume })?;
            Ok(0)
        }
        Command::LoadKey { recursive, all, noop, location, datasets } => crate::keys::load_key(&socket, datasets, recursive, all, noop, location),
        Command::UnloadKey { recursive, all, datasets } => crate::keys::unload_key(&socket, datasets, recursive, all),
        Command::ChangeKey { load, inherit, props, dataset } => {
            for (prop, _) in &props {
                props::check_name(prop).map_err(prop_failure)?;
            }
            crate::keys::change_key(&socket, dataset, props, load, inherit)
        }
        Command::Destroy { recursive, dependents, force, dry_run, verbose, parsable, dataset } => {
            let response = send(&socket, &Request::Destroy { dataset, recursive, force, dry_run, dependents })?;
            if verbose || parsable {
                let names: Vec<String> = data(response)?;
                for name in names {
                    if parsable {
                        println!("destroy\t{name}");
                    } else {
                        println!("{} destroy {name}", if dry_run { "would" } else { "will" });
                    }
                }
            }
            Ok(0)
        }
        Command::Snapshot { recursive, snapshots } => {
            send(&socket, &Request::Snapshot { names: snapshots, recursive })?;
            Ok(0)
        }
        Command::Bookmark { source, bookmark } => {
            send(&socket, &Request::Bookmark { source, target: bookmark })?;
            Ok(0)
        }
        Command::Rollback { destroy_later, force, snapshot } => {
            send(&socket, &Request::Rollback { snapshot, destroy_later, force })?;
            Ok(0)
        }
        Command::Clone { props, snapshot, target } => {
            send(&socket, &Request::Clone { snapshot, target, properties: props })?;
            Ok(0)
        }
        Command::Promote { dataset } => {
            send(&socket, &Request::Promote { dataset })?;
            Ok(0)
        }
        Command::Hold { recursive, tag, snapshots } => {
            send(&socket, &Request::Hold { tag, snapshots, release: false, recursive })?;
            Ok(0)
        }
        Command::Release { recursive, tag, snapshots } => {
            send(&socket, &Request::Hold { tag, snapshots, release: true, recursive })?;
            Ok(0)
        }
        Command::Send { from, from_all, replicate, props, dry_run, verbose, parsable, raw, token, snapshot } => {
            let args = crate::replication::SendArgs { from, from_all, replicate, props, dry_run, verbose, parsable, raw, token, snapshot };
            crate::replication::send(&socket, args)
        }
        Command::Recv { force, resumable, no_mount, verbose, abort, set, exclude, discard_pool, last_component, target } => {
            let args = crate::replication::RecvArgs {
                force,
                resumable,
                no_mount,
                verbose,
                abort,
                set,
                exclude,
                discard_pool,
                last_component,
                target,
            };
            crate::replication::recv(&socket, args)
        }
        Command::Holds { recursive, scripted, parsable: _, json, snapshots } => {
            let rows: Vec<HoldRow> = data(send(&socket, &Request::Holds { snapshots, recursive })?)?;
            if json {
                print_json(&output::holds_json(&rows));
            } else {
                print!("{}", holds_table(&rows, scripted));
            }
            Ok(0)
        }
        Command::List { recursive, depth, sort_ascending, sort_descending, scripted, parsable, json, columns, types, datasets } => {
            let columns = columns.map(|c| c.0).unwrap_or_else(|| props::LIST_DEFAULT_COLUMNS.iter().map(|s| s.to_string()).collect());
            check_props(&columns)?;
            let sort = sort_keys(sort_ascending, sort_descending);
            for (prop, _) in &sort {
                props::check_name(prop).map_err(prop_failure)?;
            }
            // zfs's default (listsnapshots=off): file systems only.
            let types = dataset_types(types, &["filesystem", "volume"])?;
            let columns: Vec<String> = columns.iter().map(|c| canonical(c)).collect();
            let request = Request::TypedProps { datasets, recursive, props: columns.clone(), parsable, types, depth, sort };
            let rows: Vec<DatasetRow> = data(send(&socket, &request)?)?;
            if json {
                print_json(&output::datasets_json("zfs list", &rows));
            } else {
                let headers: Vec<String> = columns.iter().map(|c| props::column_header(c)).collect();
                let lines: Vec<Vec<String>> =
                    rows.iter().map(|r| r.props.iter().map(|c| c.value.clone()).collect()).collect();
                print!("{}", output::table(&headers, &lines, scripted));
            }
            Ok(0)
        }
        Command::Get { scripted, parsable, json, recursive, depth, fields, types, props: wanted, datasets } => {
            let fields = get_fields(fields)?;
            let wanted: Vec<String> = wanted.0;
            check_props(&wanted)?;
            let wanted: Vec<String> = wanted.iter().map(|p| canonical(p)).collect();
            // zfs get: every type (snapshots show up with -r or no dataset).
            let types = dataset_types(types, &["filesystem", "volume", "snapshot", "bookmark"])?;
            let request = Request::TypedProps { datasets, recursive, props: wanted, parsable, types, depth, sort: vec![] };
            let response = send(&socket, &request)?;
            let rows: Vec<DatasetRow> = data(response)?;
            if json {
                print_json(&output::datasets_json("zfs get", &rows));
            } else {
                let rows = rows.into_iter().map(|r| (r.name, r.props)).collect();
                print!("{}", get_table(rows, &fields, scripted));
            }
            Ok(0)
        }
        Command::Set { force, mut args } => {
            let dataset = args.pop().unwrap_or_default();
            let mut assignments = Vec::new();
            for arg in &args {
                let (prop, value) = crate::cli::assignment(arg).map_err(Failure::usage)?;
                props::check_name(&prop).map_err(prop_failure)?;
                assignments.push((prop, value));
            }
            send(&socket, &Request::Set { assignments, dataset, force })?;
            Ok(0)
        }
        Command::Inherit { recursive, received, prop, datasets } => {
            props::check_name(&prop).map_err(prop_failure)?;
            send(&socket, &Request::Inherit { prop, datasets, recursive, received })?;
            Ok(0)
        }
        Command::Rename { parents, recursive, force, no_mount, source, target } => {
            send(&socket, &Request::Rename { source, target, parents, recursive, force, no_mount })?;
            Ok(0)
        }
        Command::Mount { all: true, .. } => {
            send(&socket, &Request::MountAll)?;
            Ok(0)
        }
        Command::Mount { dataset, .. } => {
            send(&socket, &Request::Mount { dataset })?;
            Ok(0)
        }
        Command::Unmount { force, all: true, .. } => {
            send(&socket, &Request::UnmountAll { force })?;
            Ok(0)
        }
        Command::Unmount { force, target, .. } => {
            let target = target.unwrap_or_default();
            let target = if target.contains('/') && target.starts_with(['/', '.']) { path_string(Path::new(&target)) } else { target };
            send(&socket, &Request::Unmount { target, force })?;
            Ok(0)
        }
        Command::Debug(DebugCommand::Check { pool }) => {
            send(&socket, &Request::DebugCheck { pool })?;
            Ok(0)
        }
        Command::Diff { classify, scripted, timestamps, no_mangle, help: _, snapshot, target } => {
            let options = crate::diff::DiffOptions { classify, scripted, timestamps, no_mangle };
            crate::diff::run(&socket, &snapshot, target.as_deref(), options)
        }
        Command::Tunable(command) => crate::tunable::run(&socket, command),
        Command::Arcstat { json, parsable, interval, count } => crate::tunable::arcstat(&socket, json, parsable, interval, count),
        Command::Share { all, list, json, scripted, dataset } => crate::shares::share(&socket, all, list, json, scripted, dataset),
        Command::Unshare { all: _, target } => crate::shares::unshare(&socket, target),
        Command::Smb(command) => crate::shares::smb(&socket, command),
        Command::Alert(AlertCommand::Test { json, pool }) => {
            let rows: Vec<AlertTestRow> = data(send(&socket, &Request::AlertTest { pool })?)?;
            if json {
                print_json(&events::alert_json(&rows));
            } else {
                print!("{}", events::alert_lines(&rows));
            }
            Ok(if rows.iter().all(|r| r.ok) { 0 } else { 1 })
        }
    }
}

fn pool(socket: &Path, command: PoolCommand) -> Result<i32, Failure> {
    match command {
        PoolCommand::Create { force, dry_run, mountpoint, altroot, pool_props, fs_props, pool, vdevs } => {
            let cannot = |e: String| Failure::from(format!("cannot create '{pool}': {e}"));
            let mut spec = vdevspec::parse_pool_spec(&vdevs).map_err(cannot)?;
            if spec.vdevs.iter().all(|g| g.log) {
                return Err(cannot("at least one top-level vdev must be given (spares and logs alone are not a pool)".into()));
            }
            for device in spec.vdevs.iter_mut().flat_map(|g| g.devices.iter_mut()).chain(spec.spares.iter_mut()).chain(spec.cache.iter_mut()) {
                *device = resolve_device(device).map_err(cannot)?;
            }
            let mut ashift = None;
            let mut other = Vec::new();
            for (prop, value) in pool_props {
                if prop == "ashift" {
                    let value: u8 = value
                        .parse()
                        .ok()
                        .filter(|v| (9..=16).contains(v))
                        .ok_or_else(|| cannot(format!("bad value '{value}' for property 'ashift': must be 9..16")))?;
                    ashift = Some(value);
                } else {
                    other.push((prop, value));
                }
            }
            // `-O keyformat=…` with the key at a prompt: asked here (not on dry runs).
            let key = if dry_run { None } else { crate::keys::create_key(&pool, &fs_props)? };
            send(
                socket,
                &Request::PoolCreate {
                    key,
                    pool: pool.clone(),
                    vdevs: spec.vdevs,
                    force,
                    dry_run,
                    mountpoint,
                    altroot: altroot.map(|p| path_string(&p)),
                    ashift,
                    pool_props: other,
                    fs_props,
                    cache: spec.cache,
                },
            )?;
            // Spares join the new pool in a second step (the daemon creates
            // pools from top-level vdevs only).
            if !spec.spares.is_empty() {
                if dry_run {
                    print!("\tspares\n{}", spec.spares.iter().map(|s| format!("\t  {s}\n")).collect::<String>());
                } else {
                    let request = Request::PoolAdd { pool, vdevs: vec![], spares: spec.spares, force, dry_run: false, cache: vec![] };
                    send(socket, &request).map_err(|f| Failure {
                        message: format!("{} (the pool was created without its spares)", f.message),
                        exit: f.exit,
                    })?;
                }
            }
            Ok(0)
        }
        PoolCommand::Import { dirs, force, rewind, missing_log, load_keys, rewind_to_checkpoint, altroot, pool } => {
            let dirs = dirs.iter().map(|d| path_string(d)).collect();
            let altroot = altroot.map(|p| path_string(&p));
            match pool {
                Some(pool) if rewind_to_checkpoint => {
                    send(socket, &Request::PoolImportCheckpoint { dirs, force, altroot, pool })?;
                }
                Some(pool) if load_keys => {
                    // A numeric id names the pool only until it is imported.
                    let response = send(socket, &Request::PoolImport { dirs, force, rewind, altroot, pool: Some(pool.clone()), missing_log, load_keys })?;
                    let name = response.data.as_ref().and_then(|d| d["name"].as_str()).map_or(pool, str::to_string);
                    return crate::keys::after_import(socket, &name);
                }
                pool => {
                    send(socket, &Request::PoolImport { dirs, force, rewind, altroot, pool, missing_log, load_keys })?;
                }
            };
            Ok(0)
        }
        PoolCommand::Export { force, pool } => {
            send(socket, &Request::PoolExport { pool, force })?;
            Ok(0)
        }
        PoolCommand::Destroy { force, pool } => {
            send(socket, &Request::PoolDestroy { pool, force })?;
            Ok(0)
        }
        PoolCommand::List { scripted, parsable, json, columns, verbose, pools } => {
            let columns =
                columns.map(|c| c.0).unwrap_or_else(|| ["name", "size", "alloc", "free", "checkpoint", "cap", "health"].map(String::from).to_vec());
            let columns: Vec<String> = columns
                .iter()
                .map(|c| props::lookup_pool_prop(c).map(String::from).map_err(|e| Failure::usage(e.to_string())))
                .collect::<Result<_, _>>()?;
            let response = send(socket, &Request::PoolList { pools, parsable })?;
            let rows: Vec<PoolRow> = data(response)?;
            let rows: Vec<PoolRow> = rows
                .into_iter()
                .map(|mut r| {
                    r.props = columns.iter().filter_map(|c| r.props.iter().find(|p| &p.property == c).cloned()).collect();
                    r
                })
                .collect();
            if verbose {
                return crate::iostat::list_verbose(socket, &columns, &rows, scripted, parsable, json);
            }
            if json {
                print_json(&output::pools_json("zpool list", &rows));
            } else {
                let headers: Vec<String> = columns
                    .iter()
                    .map(|c| match c.as_str() {
                        "allocated" => "ALLOC".into(),
                        "capacity" => "CAP".into(),
                        "checkpoint" => "CKPOINT".into(),
                        other => other.to_ascii_uppercase(),
                    })
                    .collect();
                let lines: Vec<Vec<String>> = rows.iter().map(|r| r.props.iter().map(|p| p.value.clone()).collect()).collect();
                print!("{}", output::table(&headers, &lines, scripted));
            }
            Ok(0)
        }
        PoolCommand::Status { verbose, trim, json, unhealthy, pools } => {
            if unhealthy {
                return crate::health_x::run(socket, verbose, json, pools);
            }
            let response = send(socket, &Request::PoolStatus { pools, verbose })?;
            let pools: Vec<PoolStatusData> = data(response)?;
            if json {
                print_json(&status::status_json(&pools));
            } else if pools.is_empty() {
                println!("no pools available");
            } else {
                print!("{}", status::status_text_with(&pools, verbose, trim, Zone::Local));
            }
            Ok(0)
        }
        PoolCommand::Get { scripted, parsable, json, fields, props: wanted, pools } => {
            let fields = get_fields(fields)?;
            let wanted: Vec<String> = wanted.0;
            let wanted: Vec<String> = if wanted.iter().any(|p| p == "all") {
                props::POOL_PROPERTIES.iter().map(|s| s.to_string()).collect()
            } else {
                wanted
                    .iter()
                    .map(|p| props::lookup_pool_prop(p).map(String::from).map_err(|e| Failure::usage(e.to_string())))
                    .collect::<Result<_, _>>()?
            };
            let response = send(socket, &Request::PoolList { pools, parsable })?;
            let rows: Vec<PoolRow> = data(response)?;
            let rows: Vec<PoolRow> = rows
                .into_iter()
                .map(|mut r| {
                    r.props = wanted.iter().filter_map(|c| r.props.iter().find(|p| &p.property == c).cloned()).collect();
                    r
                })
                .collect();
            if json {
                print_json(&output::pools_json("zpool get", &rows));
            } else {
                let rows = rows.into_iter().map(|r| (r.name, r.props)).collect();
                print!("{}", get_table(rows, &fields, scripted));
            }
            Ok(0)
        }
        PoolCommand::Set { assignment: (prop, value), pool } => {
            send(socket, &Request::PoolSet { prop, value, pool })?;
            Ok(0)
        }
        PoolCommand::Events { follow, json, scripted, clear, pool } => {
            events::run(socket, events::EventsOptions { follow, json, scripted, clear, pool })
        }
        PoolCommand::Iostat { verbose, latency, scripted, parsable, json, skip_first, args } => {
            let options = crate::iostat::IostatOptions { verbose, latency, scripted, parsable, json, skip_first };
            crate::iostat::run(socket, args, options)
        }
        PoolCommand::History { internal, long, pools } => crate::history::run(socket, pools, internal, long),
        command @ (PoolCommand::Trim { .. } | PoolCommand::Checkpoint { .. }) => crate::trim::run(socket, command),
        device_command => devices::run(socket, device_command),
    }
}

