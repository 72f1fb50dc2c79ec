//! Command-line grammar (clap). `tarn pool <verb>` mirrors `zpool <verb>`,
//! `tarn <verb>` mirrors `zfs <verb>`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `PROP=VALUE`, for `-o`, `-O` and `set` (bad syntax is a usage error).
pub fn assignment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((prop, value)) if !prop.is_empty() => Ok((prop.to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not of the form PROPERTY=VALUE")),
    }
}

/// clap's usage error as one line: its first line, plus the list that
/// follows when that line ends in a colon ("required arguments were not
/// provided: <OLD>").
pub fn usage_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("bad usage").trim_start_matches("error: ").trim_end();
    if !first.ends_with(':') {
        return first.to_string();
    }
    let items: Vec<&str> = lines.map(str::trim).take_while(|l| !l.is_empty()).collect();
    if items.is_empty() {
        first.to_string()
    } else {
        format!("{first} {}", items.join(" "))
    }
}

/// Activities `pool wait -t` knows, in zpool's column order.
pub const WAIT_ACTIVITIES: [&str; 4] = ["replace", "resilver", "scrub", "trim"];

/// `-t scrub,resilver` for `pool wait` (an unknown activity is a usage
/// error).
pub fn activity_list(text: &str) -> Result<CommaList, String> {
    let list = comma_list(text)?;
    for item in &list.0 {
        if !WAIT_ACTIVITIES.contains(&item.as_str()) {
            return Err(format!("invalid activity '{item}' (replace, resilver, scrub, trim)"));
        }
    }
    Ok(list)
}

/// `pool trim -r`'s RATE: bytes per second, with zfs's units (`100M`).
pub fn rate(text: &str) -> Result<u64, String> {
    tarn_ds::size::parse_size(text).filter(|r| *r > 0).ok_or_else(|| format!("invalid value '{text}' for rate: a size per second, e.g. 100M"))
}

/// `pool wait`'s INTERVAL: positive seconds, fractions allowed.
pub fn interval(text: &str) -> Result<std::time::Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|secs| secs.is_finite() && *secs > 0.0 && *secs < 1e9)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("invalid interval '{text}': must be a positive number of seconds"))
}

/// A comma-separated list (`-o name,used`), parsed as one argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommaList(pub Vec<String>);

pub fn comma_list(text: &str) -> Result<CommaList, String> {
    let items: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    if items.iter().any(|s| s.is_empty()) {
        return Err(format!("bad list '{text}'"));
    }
    Ok(CommaList(items))
}

#[derive(Parser, Debug)]
#[command(name = "tarn", version, about = "tarn: ZFS-class storage in userspace", disable_help_subcommand = true)]
pub struct Cli {
    /// Daemon socket (else $TARN_SOCKET, else <state dir>/tarn.sock).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the daemon in the foreground.
    Daemon {
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Pool commands (zpool).
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Create a dataset.
    Create {
        #[arg(short = 'p')]
        parents: bool,
        #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = assignment)]
        props: Vec<(String, String)>,
        /// A volume of this size (a block device served over NBD).
        #[arg(short = 'V', value_name = "SIZE")]
        volsize: Option<String>,
        /// With -V: a sparse volume (no reservation).
        #[arg(short = 's', requires = "volsize")]
        sparse: bool,
        /// With -V: the volume's block size (volblocksize; 16K by default).
        #[arg(short = 'b', requires = "volsize", value_name = "SIZE")]
        blocksize: Option<String>,
        dataset: String,
    },
    /// Destroy a dataset, or snapshots: DATASET@NAME, DATASET@FIRST%LAST
    /// (a range; either end may be empty), DATASET@A,B%C (a list).
    Destroy {
        /// A dataset: its descendants too. Snapshots: the same names in
        /// every descendant.
        #[arg(short = 'r')]
        recursive: bool,
        /// Everything that depends on it too: -r, and the clones of the
        /// snapshots destroyed (with theirs, in turn).
        #[arg(short = 'R')]
        dependents: bool,
        /// Unmount busy file systems anyway.
        #[arg(short = 'f')]
        force: bool,
        /// Dry run: destroy nothing (with -v: list what would go).
        #[arg(short = 'n')]
        dry_run: bool,
        /// Print what is (or would be) destroyed.
        #[arg(short = 'v')]
        verbose: bool,
        /// With -v: machine-parsable lines (`destroy<TAB>NAME`).
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(value_name = "DATASET|SNAPSHOTS")]
        dataset: String,
    },
    /// Take snapshots, all at once (atomically).
    #[command(alias = "snap")]
    Snapshot {
        /// The same snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(required = true, value_name = "DATASET@NAME")]
        snapshots: Vec<String>,
    },
    /// Bookmark a snapshot (or copy a bookmark): `fs#name` keeps the
    /// snapshot's guid and txg, holds no space, and is a base for
    /// incremental sends after the snapshot is destroyed.
    Bookmark {
        #[arg(value_name = "SNAPSHOT|BOOKMARK")]
        source: String,
        #[arg(value_name = "DATASET#NAME")]
        bookmark: String,
    },
    /// Roll a dataset back to a snapshot (it is unmounted and mounted again).
    Rollback {
        /// Destroy snapshots more recent than the one rolled back to.
        #[arg(short = 'r')]
        destroy_later: bool,
        /// Unmount the dataset even if it is busy.
        #[arg(short = 'f')]
        force: bool,
        #[arg(value_name = "DATASET@NAME")]
        snapshot: String,
    },
    /// Create a file system that starts as a snapshot (a clone).
    Clone {
        /// Set a property on the clone.
        #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = assignment)]
        props: Vec<(String, String)>,
        #[arg(value_name = "DATASET@NAME")]
        snapshot: String,
        #[arg(value_name = "TARGET")]
        target: String,
    },
    /// Make a clone independent of its origin: it takes over the origin
    /// snapshot and the snapshots before it.
    Promote {
        #[arg(value_name = "CLONE")]
        dataset: String,
    },
    /// Place a user hold on snapshots (a held snapshot cannot be destroyed).
    Hold {
        /// The same snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        tag: String,
        #[arg(required = true, value_name = "SNAPSHOT")]
        snapshots: Vec<String>,
    },
    /// Release a user hold from snapshots.
    Release {
        #[arg(short = 'r')]
        recursive: bool,
        tag: String,
        #[arg(required = true, value_name = "SNAPSHOT")]
        snapshots: Vec<String>,
    },
    /// List the user holds of snapshots.
    Holds {
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'H')]
        scripted: bool,
        /// Accepted for zfs compatibility (hold times are not stored).
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'j')]
        json: bool,
        #[arg(required = true, value_name = "SNAPSHOT")]
        snapshots: Vec<String>,
    },
    /// Write a snapshot (or the changes since an earlier one) as a stream
    /// to standard output.
    Send {
        /// Incremental from this earlier snapshot (@NAME, DATASET@NAME) or
        /// bookmark (DATASET#NAME).
        #[arg(short = 'i', value_name = "SNAPSHOT", conflicts_with = "from_all")]
        from: Option<String>,
        /// Incremental from this snapshot, with every snapshot in between.
        #[arg(short = 'I', value_name = "SNAPSHOT")]
        from_all: Option<String>,
        /// Replicate: the dataset and its descendants, their snapshots and
        /// properties.
        #[arg(short = 'R')]
        replicate: bool,
        /// Include the datasets' properties.
        #[arg(short = 'p')]
        props: bool,
        /// Dry run: send nothing (with -v: the size it would be).
        #[arg(short = 'n')]
        dry_run: bool,
        /// Print what is sent (to stderr; with -n to stdout).
        #[arg(short = 'v')]
        verbose: bool,
        /// With -n: machine-parsable estimate lines (`size<TAB>BYTES`).
        #[arg(short = 'P')]
        parsable: bool,
        /// Raw: as stored. An encrypted dataset travels as ciphertext with
        /// its wrapped key (no key needed on either side); for unencrypted
        /// datasets the same stream as without -w (as in zfs).
        #[arg(short = 'w')]
        raw: bool,
        /// Continue an interrupted receive from its receive_resume_token.
        #[arg(short = 't', value_name = "TOKEN", conflicts_with_all = ["from", "from_all", "replicate", "props", "snapshot"])]
        token: Option<String>,
        #[arg(value_name = "SNAPSHOT", required_unless_present = "token")]
        snapshot: Option<String>,
    },
    /// Read a stream (from `tarn send`) from standard input into a dataset.
    #[command(alias = "receive")]
    Recv {
        /// Roll the destination back to the stream's base first (destroying
        /// later snapshots), or replace it with a full stream.
        #[arg(short = 'F')]
        force: bool,
        /// If the stream stops, keep what arrived and a receive_resume_token.
        #[arg(short = 's')]
        resumable: bool,
        /// Do not mount what is received.
        #[arg(short = 'u')]
        no_mount: bool,
        /// Print what was received.
        #[arg(short = 'v')]
        verbose: bool,
        /// Abort an interrupted receive: give up its partial state.
        #[arg(short = 'A', conflicts_with_all = ["force", "resumable", "set", "exclude"])]
        abort: bool,
        /// Set a property on the received dataset (overrides a received one).
        #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = assignment)]
        set: Vec<(String, String)>,
        /// Do not take this property from the stream.
        #[arg(short = 'x', value_name = "PROP")]
        exclude: Vec<String>,
        /// Receive below DATASET under the sent name without its pool
        /// (tank/media → DATASET/media); missing parents are created.
        #[arg(short = 'd', conflicts_with = "last_component")]
        discard_pool: bool,
        /// Receive below DATASET under the sent name's last component.
        #[arg(short = 'e')]
        last_component: bool,
        #[arg(value_name = "DATASET")]
        target: String,
    },
    /// List datasets.
    List {
        #[arg(short = 'r')]
        recursive: bool,
        /// Recurse at most DEPTH levels below each dataset (implies -r).
        #[arg(short = 'd', value_name = "DEPTH")]
        depth: Option<u32>,
        /// Sort by this property, ascending (repeatable).
        #[arg(short = 's', value_name = "PROP")]
        sort_ascending: Vec<String>,
        /// Sort by this property, descending (repeatable).
        #[arg(short = 'S', value_name = "PROP")]
        sort_descending: Vec<String>,
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'j')]
        json: bool,
        #[arg(short = 'o', value_name = "PROPS", value_parser = comma_list)]
        columns: Option<CommaList>,
        #[arg(short = 't', value_name = "TYPE", value_parser = comma_list)]
        types: Option<CommaList>,
        datasets: Vec<String>,
    },
    /// Get dataset properties.
    Get {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'j')]
        json: bool,
        #[arg(short = 'r')]
        recursive: bool,
        /// Recurse at most DEPTH levels below each dataset (implies -r).
        #[arg(short = 'd', value_name = "DEPTH")]
        depth: Option<u32>,
        #[arg(short = 'o', value_name = "FIELDS", value_parser = comma_list)]
        fields: Option<CommaList>,
        #[arg(short = 't', value_name = "TYPE", value_parser = comma_list)]
        types: Option<CommaList>,
        #[arg(value_parser = comma_list, value_name = "PROP[,PROP...]|all")]
        props: CommaList,
        datasets: Vec<String>,
    },
    /// Set dataset properties: PROP=VALUE... DATASET.
    Set {
        /// A smaller volsize is applied (the data past it is discarded).
        #[arg(short = 'f')]
        force: bool,
        #[arg(required = true, num_args = 2.., value_name = "PROP=VALUE... DATASET")]
        args: Vec<String>,
    },
    /// Clear a property's local setting: the value is inherited again (or
    /// the default), even over a received value, which stays masked until
    /// `set` or `inherit -S`.
    Inherit {
        /// On every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        /// Revert to the received value (if the dataset has one).
        #[arg(short = 'S')]
        received: bool,
        #[arg(value_name = "PROP")]
        prop: String,
        #[arg(required = true, value_name = "DATASET")]
        datasets: Vec<String>,
    },
    /// Rename a dataset (with its descendants, snapshots and bookmarks), or
    /// a snapshot (FS@OLD FS@NEW, or @NEW).
    Rename {
        /// Create missing parents of the new name.
        #[arg(short = 'p')]
        parents: bool,
        /// Snapshots: the same snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        /// Unmount busy file systems anyway.
        #[arg(short = 'f')]
        force: bool,
        /// Do not mount the renamed file systems again.
        #[arg(short = 'u')]
        no_mount: bool,
        #[arg(value_name = "DATASET|SNAPSHOT")]
        source: String,
        #[arg(value_name = "NEWNAME")]
        target: String,
    },
    /// Load the key of an encryption root (-r: and of the roots below it;
    /// -a: of every root). Does not mount (use `mount -a`).
    #[command(name = "load-key")]
    LoadKey {
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'a', conflicts_with = "datasets")]
        all: bool,
        /// Only check that the key is right; load nothing.
        #[arg(short = 'n')]
        noop: bool,
        /// Read the key from here instead of the keylocation property
        /// (prompt or file:///path).
        #[arg(short = 'L', value_name = "KEYLOCATION")]
        location: Option<String>,
        #[arg(required_unless_present = "all")]
        datasets: Vec<String>,
    },
    /// Unmount an encryption root's datasets and forget their keys.
    #[command(name = "unload-key")]
    UnloadKey {
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'a', conflicts_with = "datasets")]
        all: bool,
        #[arg(required_unless_present = "all")]
        datasets: Vec<String>,
    },
    /// Change an encryption root's key (keyformat, keylocation,
    /// pbkdf2iters): its master keys are rewrapped, no data is rewritten.
    #[command(name = "change-key")]
    ChangeKey {
        /// Load the current key first if it is not loaded.
        #[arg(short = 'l')]
        load: bool,
        /// Join the parent's encryption root (its key opens this one).
        #[arg(short = 'i', conflicts_with = "props")]
        inherit: bool,
        #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = assignment)]
        props: Vec<(String, String)>,
        dataset: String,
    },
    /// Mount a dataset (-a: every dataset that is not mounted), or list mounts.
    Mount {
        #[arg(short = 'a', conflicts_with = "dataset")]
        all: bool,
        dataset: Option<String>,
    },
    /// Unmount a dataset or mountpoint (-a: every mounted dataset).
    #[command(alias = "umount")]
    Unmount {
        #[arg(short = 'f')]
        force: bool,
        #[arg(short = 'a', conflicts_with = "target")]
        all: bool,
        #[arg(required_unless_present = "all")]
        target: Option<String>,
    },
    /// Debugging aids.
    #[command(subcommand)]
    Debug(DebugCommand),
    /// Alerting (e-mail, webhook, command; configured in [alerts]).
    #[command(subcommand)]
    Alert(AlertCommand),
    /// Set up and start everything on this machine (daemon, pool, dataset).
    Up {
        /// Where the vdevs, the daemon's state and the mount live (else
        /// $TARN_HOME, else the daemon's state directory, /var/lib/tarn).
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Stop the daemon started by `tarn up`.
    Down {
        /// As for `tarn up`.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Print the version.
    Version,
    /// Files and directories changed between a snapshot and a later
    /// snapshot or the file system (+ created, - removed, M modified, R renamed).
    #[command(disable_help_flag = true)]
    Diff {
        /// The file type column (F file, / directory, @ symlink, | fifo, = socket, B, C devices).
        #[arg(short = 'F')]
        classify: bool,
        /// Scriptable: a tab instead of ` -> ` between a rename's paths.
        #[arg(short = 'H')]
        scripted: bool,
        /// The inode change time as the first column.
        #[arg(short = 't')]
        timestamps: bool,
        /// Paths as they are (no \0ooo escapes of unusual bytes).
        #[arg(short = 'h')]
        no_mangle: bool,
        #[arg(long = "help", action = clap::ArgAction::Help)]
        help: Option<bool>,
        #[arg(value_name = "SNAPSHOT")]
        snapshot: String,
        #[arg(value_name = "SNAPSHOT|FILESYSTEM")]
        target: Option<String>,
    },
    /// The daemon's tunables at run time (ZFS's module parameters).
    #[command(subcommand)]
    Tunable(TunableCommand),
    /// ARC statistics: size, target (c), arc_max, hits, misses, hit ratio
    /// (since the daemon started, then every INTERVAL seconds, COUNT times).
    Arcstat {
        #[arg(short = 'j')]
        json: bool,
        /// Exact numbers (bytes) instead of 1.5G.
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(value_name = "INTERVAL", value_parser = interval)]
        interval: Option<std::time::Duration>,
        #[arg(value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Share datasets over NFS and SMB as their sharenfs/sharesmb say
    /// (-a: all; -l: list what is shared, how and to whom).
    Share {
        #[arg(short = 'a', conflicts_with_all = ["dataset", "list"])]
        all: bool,
        #[arg(short = 'l', conflicts_with = "dataset")]
        list: bool,
        /// With -l: JSON.
        #[arg(short = 'j', requires = "list")]
        json: bool,
        /// With -l: scripted (no header, tab-separated).
        #[arg(short = 'H', requires = "list")]
        scripted: bool,
        #[arg(required_unless_present_any = ["all", "list"])]
        dataset: Option<String>,
    },
    /// Stop sharing a dataset (or mountpoint; -a: all) until `tarn share`
    /// or its next mount.
    Unshare {
        #[arg(short = 'a', conflicts_with = "target")]
        all: bool,
        #[arg(required_unless_present = "all")]
        target: Option<String>,
    },
    /// The daemon's Samba (its users' SMB passwords).
    #[command(subcommand)]
    Smb(SmbCommand),
}

#[derive(Subcommand, Debug)]
pub enum SmbCommand {
    /// SMB passwords of existing system users (add, remove, list).
    #[command(subcommand)]
    User(SmbUserCommand),
}

#[derive(Subcommand, Debug)]
pub enum SmbUserCommand {
    /// Give a system user an SMB password (asked twice, or one line on stdin).
    Add {
        #[arg(long)]
        password_stdin: bool,
        user: String,
    },
    /// Remove a user's SMB password.
    Remove { user: String },
    /// The users with an SMB password.
    List {
        #[arg(short = 'j')]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum TunableCommand {
    /// Show one tunable, or all: NAME, VALUE (bytes or seconds), SOURCE
    /// (default, config, set).
    Get {
        #[arg(short = 'j')]
        json: bool,
        /// Scripted: no header, tab-separated.
        #[arg(short = 'H')]
        scripted: bool,
        name: Option<String>,
    },
    /// Set tunables for every pool at once (all or none).
    Set {
        /// Also write them into the daemon's config file.
        #[arg(long)]
        persist: bool,
        #[arg(value_name = "NAME=VALUE", required = true, value_parser = assignment)]
        assignments: Vec<(String, String)>,
    },
}

#[derive(Subcommand, Debug)]
pub enum DebugCommand {
    /// Walk and verify every block of a pool (like zdb -b).
    Check { pool: String },
}

#[derive(Subcommand, Debug)]
pub enum AlertCommand {
    /// Send a test message through every configured channel.
    Test {
        #[arg(short = 'j')]
        json: bool,
        pool: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum PoolCommand {
    Create {
        #[arg(short = 'f')]
        force: bool,
        #[arg(short = 'n')]
        dry_run: bool,
        #[arg(short = 'm', value_name = "MOUNTPOINT")]
        mountpoint: Option<String>,
        #[arg(short = 'R', value_name = "ALTROOT")]
        altroot: Option<PathBuf>,
        #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = assignment)]
        pool_props: Vec<(String, String)>,
        #[arg(short = 'O', value_name = "PROP=VALUE", value_parser = assignment)]
        fs_props: Vec<(String, String)>,
        pool: String,
        #[arg(required = true, value_name = "VDEVSPEC")]
        vdevs: Vec<String>,
    },
    Import {
        #[arg(short = 'd', value_name = "DIR")]
        dirs: Vec<PathBuf>,
        #[arg(short = 'f')]
        force: bool,
        #[arg(short = 'F')]
        rewind: bool,
        /// Import although a log device is missing (its log records are lost).
        #[arg(short = 'm', conflicts_with = "rewind_to_checkpoint")]
        missing_log: bool,
        /// Load encryption keys (files, then prompts) before mounting.
        #[arg(short = 'l')]
        load_keys: bool,
        /// Rewind the pool to its checkpoint (every later change is lost).
        #[arg(long = "rewind-to-checkpoint", conflicts_with = "rewind", requires = "pool")]
        rewind_to_checkpoint: bool,
        #[arg(short = 'R', value_name = "ALTROOT")]
        altroot: Option<PathBuf>,
        pool: Option<String>,
    },
    Export {
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
    Destroy {
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
    List {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'j')]
        json: bool,
        #[arg(short = 'o', value_name = "PROPS", value_parser = comma_list)]
        columns: Option<CommaList>,
        /// A row per top-level vdev and device below each pool, and spares.
        #[arg(short = 'v')]
        verbose: bool,
        pools: Vec<String>,
    },
    Status {
        #[arg(short = 'v')]
        verbose: bool,
        /// Show each device's trim progress and when it changed.
        #[arg(short = 't')]
        trim: bool,
        #[arg(short = 'j')]
        json: bool,
        /// Only pools with a problem ("all pools are healthy" otherwise).
        #[arg(short = 'x')]
        unhealthy: bool,
        pools: Vec<String>,
    },
    Get {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'j')]
        json: bool,
        #[arg(short = 'o', value_name = "FIELDS", value_parser = comma_list)]
        fields: Option<CommaList>,
        #[arg(value_parser = comma_list, value_name = "PROP[,PROP...]|all")]
        props: CommaList,
        pools: Vec<String>,
    },
    Set {
        #[arg(value_parser = assignment)]
        assignment: (String, String),
        pool: String,
    },
    /// Start a scrub (or resume a paused one); -p pauses, -s stops it.
    Scrub {
        #[arg(short = 'p', conflicts_with = "stop")]
        pause: bool,
        #[arg(short = 's')]
        stop: bool,
        /// Wait until the scrub is done.
        #[arg(short = 'w', conflicts_with_all = ["pause", "stop"])]
        wait: bool,
        #[arg(required = true)]
        pools: Vec<String>,
    },
    /// Wait until scrubs, resilvers or replacements are done.
    Wait {
        /// Activities to wait for (replace, resilver, scrub); default all.
        #[arg(short = 't', value_name = "ACTIVITY[,ACTIVITY]...", value_parser = activity_list)]
        activities: Vec<CommaList>,
        pool: String,
        /// Print the bytes left every INTERVAL seconds while waiting.
        #[arg(value_parser = interval)]
        interval: Option<std::time::Duration>,
    },
    /// Take devices offline (they stay offline until `pool online`).
    Offline {
        /// Accepted for zpool compatibility; offline is always persistent.
        #[arg(short = 't')]
        temporary: bool,
        pool: String,
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Bring devices back online (they resilver what they missed).
    Online {
        pool: String,
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Replace a device with a new one (no NEW: a new device at OLD's path).
    Replace {
        #[arg(short = 'f')]
        force: bool,
        /// Wait until the resilver is done.
        #[arg(short = 'w')]
        wait: bool,
        pool: String,
        old: String,
        new: Option<String>,
    },
    /// Attach a device to a device or mirror, making (or widening) a mirror.
    Attach {
        #[arg(short = 'f')]
        force: bool,
        /// Wait until the new device is resilvered.
        #[arg(short = 'w')]
        wait: bool,
        pool: String,
        existing: String,
        new: String,
    },
    /// Detach a device from a mirror (or a replacing or spare group).
    Detach { pool: String, device: String },
    /// Add top-level vdevs and/or hot spares (`spare DEVICE...`).
    Add {
        #[arg(short = 'f')]
        force: bool,
        #[arg(short = 'n')]
        dry_run: bool,
        pool: String,
        #[arg(required = true, value_name = "VDEVSPEC")]
        vdevs: Vec<String>,
    },
    /// Remove hot spares.
    Remove {
        pool: String,
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Clear device errors (all devices, or one); resumes a suspended pool.
    Clear { pool: String, device: Option<String> },
    /// Write the pools' (all, or the ones named) changes to their devices
    /// now, as a transaction group: not only to the intent log, so space
    /// and `du` are current too (as zpool sync).
    Sync { pools: Vec<String> },
    /// Trim the free space of the pool's devices (all, or the ones named):
    /// holes in file vdevs, discards on block devices.
    Trim {
        /// Cancel the trim.
        #[arg(short = 'c', conflicts_with_all = ["suspend", "rate"])]
        cancel: bool,
        /// Suspend the trim (`pool trim` again resumes it).
        #[arg(short = 's', conflicts_with = "rate")]
        suspend: bool,
        /// Trim at most RATE bytes per second per device (e.g. 100M).
        #[arg(short = 'r', value_name = "RATE", value_parser = rate)]
        rate: Option<u64>,
        /// Wait until the devices are trimmed.
        #[arg(short = 'w', conflicts_with_all = ["cancel", "suspend"])]
        wait: bool,
        pool: String,
        devices: Vec<String>,
    },
    /// Checkpoint the pool's whole state (`import --rewind-to-checkpoint`
    /// brings it back), or discard the checkpoint (-d).
    Checkpoint {
        #[arg(short = 'd', long = "discard")]
        discard: bool,
        /// Wait until the checkpoint is discarded (a discard is done when
        /// the command returns).
        #[arg(short = 'w', long = "wait", requires = "discard")]
        wait: bool,
        pool: String,
    },
    /// Show the event log (-f: follow it; -c: clear it).
    Events {
        #[arg(short = 'f', conflicts_with = "clear")]
        follow: bool,
        #[arg(short = 'j', conflicts_with = "clear")]
        json: bool,
        /// Scripted: no header, tab-separated fields, RFC 3339 UTC times.
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'c')]
        clear: bool,
        pool: Option<String>,
    },
    /// I/O statistics: capacity, operations and bandwidth per pool (since
    /// import, then every INTERVAL seconds, COUNT times).
    Iostat {
        /// Per top-level vdev and device too.
        #[arg(short = 'v')]
        verbose: bool,
        /// Average latencies (total_wait, disk_wait).
        #[arg(short = 'l')]
        latency: bool,
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'j')]
        json: bool,
        /// Leave out the first report (the averages since import).
        #[arg(short = 'y')]
        skip_first: bool,
        #[arg(value_name = "POOL... [INTERVAL [COUNT]]")]
        args: Vec<String>,
    },
    /// The commands that changed the pools (kept in each pool).
    History {
        /// Internal events too (what the daemon applied, with txgs).
        #[arg(short = 'i')]
        internal: bool,
        /// Long format: user and host of each command.
        #[arg(short = 'l')]
        long: bool,
        pools: Vec<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tarn").chain(args.split_whitespace()))
    }

    fn usage_error(args: &str) {
        let err = parse(args).expect_err(args);
        assert!(err.use_stderr(), "{args}: {err}");
        assert_eq!(err.exit_code(), 2, "{args}");
    }

    #[test]
    fn parses_the_contract_commands() {
        assert!(parse("pool create -f -n -m /mnt/tank -R /alt -o ashift=12 -O compression=zstd tank raidz1 /a /b /c").is_ok());
        assert!(parse("pool import -d /srv -d /x -f -F -R /alt tank").is_ok());
        assert!(parse("pool import").is_ok());
        assert!(parse("pool export -f tank").is_ok());
        assert!(parse("pool list -H -p -j -o name,size tank").is_ok());
        assert!(parse("pool status -v -j").is_ok());
        assert!(parse("pool get all tank").is_ok());
        assert!(parse("pool set comment=hello tank").is_ok());
        assert!(parse("create -p -o recordsize=1M -o compression=zstd tank/a/b").is_ok());
        assert!(parse("destroy -r tank/a").is_ok());
        assert!(parse("list -r -H -p -j -o name,used -t filesystem tank").is_ok());
        assert!(parse("get -H -p -j -o name,property,value,source compression,recordsize tank tank/a").is_ok());
        assert!(parse("set compression=zstd atime=off tank/a").is_ok());
        assert!(parse("mount").is_ok());
        assert!(parse("unmount /mnt/tank").is_ok());
        assert!(parse("debug check tank").is_ok());
        assert!(parse("--socket /tmp/s list").is_ok());
        assert!(parse("list --socket /tmp/s").is_ok());
        assert!(parse("daemon --state-dir /tmp/x --socket /tmp/s --config /tmp/c").is_ok());
        assert!(parse("up --home /tmp/h").is_ok());
        assert!(parse("version").is_ok());
    }

    #[test]
    fn parses_device_and_scan_commands() {
        let Command::Pool(PoolCommand::Scrub { pause, stop, wait, pools }) = parse("pool scrub -w tank backup").unwrap().command else { panic!() };
        assert_eq!((pause, stop, wait), (false, false, true));
        assert_eq!(pools, vec!["tank", "backup"]);
        assert!(matches!(parse("pool scrub -p tank").unwrap().command, Command::Pool(PoolCommand::Scrub { pause: true, .. })));
        assert!(matches!(parse("pool scrub -s tank").unwrap().command, Command::Pool(PoolCommand::Scrub { stop: true, .. })));

        let Command::Pool(PoolCommand::Wait { activities, pool, interval }) = parse("pool wait -t scrub,resilver -t replace tank 0.5").unwrap().command else { panic!() };
        let activities: Vec<String> = activities.into_iter().flat_map(|l| l.0).collect();
        assert_eq!(activities, vec!["scrub", "resilver", "replace"]);
        assert_eq!(pool, "tank");
        assert_eq!(interval, Some(std::time::Duration::from_millis(500)));
        let Command::Pool(PoolCommand::Wait { activities, interval, .. }) = parse("pool wait tank").unwrap().command else { panic!() };
        assert!(activities.is_empty() && interval.is_none());

        let Command::Pool(PoolCommand::Offline { temporary, pool, devices }) = parse("pool offline -t tank /d1 /d2").unwrap().command else { panic!() };
        assert!(temporary);
        assert_eq!((pool.as_str(), devices), ("tank", vec!["/d1".to_string(), "/d2".to_string()]));
        assert!(parse("pool online tank /d1").is_ok());

        let Command::Pool(PoolCommand::Replace { force, wait, pool, old, new }) = parse("pool replace -f -w tank /d1 /d9").unwrap().command else { panic!() };
        assert!(force && wait);
        assert_eq!((pool.as_str(), old.as_str(), new.as_deref()), ("tank", "/d1", Some("/d9")));
        let Command::Pool(PoolCommand::Replace { new, .. }) = parse("pool replace tank /d1").unwrap().command else { panic!() };
        assert_eq!(new, None);

        let Command::Pool(PoolCommand::Attach { wait, existing, new, .. }) = parse("pool attach -w tank /d1 /d2").unwrap().command else { panic!() };
        assert!(wait);
        assert_eq!((existing.as_str(), new.as_str()), ("/d1", "/d2"));
        assert!(parse("pool detach tank /d2").is_ok());

        let Command::Pool(PoolCommand::Add { force, dry_run, pool, vdevs }) = parse("pool add -f -n tank mirror /a /b spare /c").unwrap().command else { panic!() };
        assert!(force && dry_run);
        assert_eq!(pool, "tank");
        assert_eq!(vdevs, vec!["mirror", "/a", "/b", "spare", "/c"]);
        assert!(parse("pool add tank spare /d8").is_ok());
        assert!(parse("pool remove tank /d8").is_ok());

        let Command::Pool(PoolCommand::Clear { pool, device }) = parse("pool clear tank").unwrap().command else { panic!() };
        assert_eq!((pool.as_str(), device), ("tank", None));
        assert!(matches!(parse("pool clear tank /d1").unwrap().command, Command::Pool(PoolCommand::Clear { device: Some(_), .. })));
        let Command::Pool(PoolCommand::Sync { pools }) = parse("pool sync a b").unwrap().command else { panic!() };
        assert_eq!(pools, vec!["a", "b"]);
        assert!(matches!(parse("pool sync").unwrap().command, Command::Pool(PoolCommand::Sync { pools }) if pools.is_empty()));
    }

    #[test]
    fn parses_events_and_alerts() {
        let Command::Pool(PoolCommand::Events { follow, json, scripted, clear, pool }) = parse("pool events -f -j -H tank").unwrap().command else { panic!() };
        assert!(follow && json && scripted && !clear);
        assert_eq!(pool.as_deref(), Some("tank"));
        let Command::Pool(PoolCommand::Events { pool, .. }) = parse("pool events").unwrap().command else { panic!() };
        assert_eq!(pool, None);
        assert!(matches!(parse("pool events -c tank").unwrap().command, Command::Pool(PoolCommand::Events { clear: true, .. })));
        let Command::Alert(AlertCommand::Test { json, pool }) = parse("alert test").unwrap().command else { panic!() };
        assert_eq!((json, pool), (false, None));
        let Command::Alert(AlertCommand::Test { json, pool }) = parse("alert test -j tank").unwrap().command else { panic!() };
        assert!(json);
        assert_eq!(pool.as_deref(), Some("tank"));
    }

    #[test]
    fn usage_errors_exit_2() {
        usage_error("");
        usage_error("frobnicate");
        usage_error("pool frobnicate");
        usage_error("list --bogus");
        usage_error("create -o novalue tank/a");
        usage_error("create -o =x tank/a");
        usage_error("pool create tank");
        usage_error("pool create -O bad tank /a");
        usage_error("set tank/a");
        usage_error("destroy");
        usage_error("pool set comment tank");
        usage_error("list -o name,,used");
        usage_error("get");
        usage_error("pool get");
        usage_error("pool scrub");
        usage_error("pool scrub -p -s tank");
        usage_error("pool scrub -w -p tank");
        usage_error("pool scrub -w -s tank");
        usage_error("pool wait");
        usage_error("pool wait -t discard tank");
        usage_error("pool wait -t scrub, tank");
        usage_error("pool wait tank 0");
        usage_error("pool wait tank soon");
        usage_error("pool wait tank 1 extra");
        usage_error("pool offline tank");
        usage_error("pool online tank");
        usage_error("pool replace tank");
        usage_error("pool replace tank /a /b /c");
        usage_error("pool attach tank a");
        usage_error("pool detach tank");
        usage_error("pool add tank");
        usage_error("pool remove tank");
        usage_error("pool clear");
        usage_error("pool events -c -f tank");
        usage_error("pool events tank backup");
        usage_error("alert");
        usage_error("alert test tank backup");
    }

    #[test]
    fn parses_trim_and_checkpoint() {
        let Command::Pool(PoolCommand::Trim { cancel, suspend, rate, wait, pool, devices }) = parse("pool trim -w -r 100M tank /d1 /d2").unwrap().command else { panic!() };
        assert_eq!((cancel, suspend, rate, wait), (false, false, Some(100 << 20), true));
        assert_eq!((pool.as_str(), devices.len()), ("tank", 2));
        assert!(matches!(parse("pool trim -c tank").unwrap().command, Command::Pool(PoolCommand::Trim { cancel: true, .. })));
        assert!(matches!(parse("pool trim -s tank /d1").unwrap().command, Command::Pool(PoolCommand::Trim { suspend: true, .. })));
        let Command::Pool(PoolCommand::Checkpoint { discard, wait, pool }) = parse("pool checkpoint -d -w tank").unwrap().command else { panic!() };
        assert_eq!((discard, wait, pool.as_str()), (true, true, "tank"));
        assert!(matches!(parse("pool checkpoint --discard tank").unwrap().command, Command::Pool(PoolCommand::Checkpoint { discard: true, .. })));
        assert!(matches!(
            parse("pool import --rewind-to-checkpoint -d /srv tank").unwrap().command,
            Command::Pool(PoolCommand::Import { rewind_to_checkpoint: true, .. })
        ));
        assert!(matches!(parse("pool status -t tank").unwrap().command, Command::Pool(PoolCommand::Status { trim: true, .. })));
        assert!(parse("pool wait -t trim tank").is_ok());
        usage_error("pool trim");
        usage_error("pool trim -r fast tank");
        usage_error("pool trim -r 0 tank");
        usage_error("pool trim -c -s tank");
        usage_error("pool trim -w -c tank");
        usage_error("pool trim -c -r 1M tank");
        usage_error("pool checkpoint");
        usage_error("pool checkpoint -w tank");
        usage_error("pool checkpoint tank backup");
        usage_error("pool import --rewind-to-checkpoint");
        usage_error("pool import --rewind-to-checkpoint -F tank");
    }

    #[test]
    fn usage_errors_are_one_line_naming_what_is_missing() {
        let err = parse("pool replace tank").expect_err("no OLD");
        assert_eq!(usage_line(&err.to_string()), "the following required arguments were not provided: <OLD>");
        let err = parse("pool add tank").expect_err("no vdevs");
        assert_eq!(usage_line(&err.to_string()), "the following required arguments were not provided: <VDEVSPEC>...");
        let err = parse("pool scrub -p -s tank").expect_err("conflict");
        assert_eq!(usage_line(&err.to_string()), "the argument '-p' cannot be used with '-s'");
    }

    #[test]
    fn lists_parse_as_one_argument() {
        let Command::Get { props, datasets, fields, .. } = parse("get -o name,value compression,recordsize tank tank/a").unwrap().command else { panic!() };
        assert_eq!(props.0, vec!["compression", "recordsize"]);
        assert_eq!(datasets, vec!["tank", "tank/a"]);
        assert_eq!(fields.unwrap().0, vec!["name", "value"]);
        let Command::List { columns, .. } = parse("list -o name,used").unwrap().command else { panic!() };
        assert_eq!(columns.unwrap().0, vec!["name", "used"]);
    }

    #[test]
    fn parses_snapshot_commands() {
        let Command::Send { from, from_all, replicate, props, token, snapshot, .. } =
            parse("send -R -p -I @a tank/a@c").unwrap().command
        else {
            panic!()
        };
        assert_eq!((from, from_all.as_deref(), replicate, props, token, snapshot.as_deref()), (None, Some("@a"), true, true, None, Some("tank/a@c")));
        assert!(parse("send -i @a -I @b tank/a@c").is_err(), "-i and -I together");
        assert!(parse("send").is_err(), "nothing to send");
        assert!(matches!(parse("send -t abc").unwrap().command, Command::Send { token: Some(_), snapshot: None, .. }));
        assert!(parse("send -t abc tank/a@b").is_err(), "a token names what to send");
        let Command::Recv { force, resumable, set, exclude, target, .. } =
            parse("receive -F -s -o compression=off -x mountpoint backup/a").unwrap().command
        else {
            panic!()
        };
        assert_eq!((force, resumable, target.as_str()), (true, true, "backup/a"));
        assert_eq!((set, exclude), (vec![("compression".to_string(), "off".to_string())], vec!["mountpoint".to_string()]));
        assert!(parse("recv -A -F backup/a").is_err());
        assert!(parse("recv -o novalue backup/a").is_err());
        let Command::Snapshot { recursive, snapshots } = parse("snapshot -r tank/a@x tank/b@x").unwrap().command else { panic!() };
        assert!(recursive);
        assert_eq!(snapshots, vec!["tank/a@x", "tank/b@x"]);
        assert!(matches!(parse("snap tank@x").unwrap().command, Command::Snapshot { recursive: false, .. }));
        let Command::Rollback { destroy_later, force, snapshot } = parse("rollback -r -f tank/a@x").unwrap().command else { panic!() };
        assert!(destroy_later && force);
        assert_eq!(snapshot, "tank/a@x");
        let Command::Destroy { recursive, dry_run, verbose, parsable, dataset, .. } = parse("destroy -r -n -v -p tank/a@x%y").unwrap().command else { panic!() };
        assert!(recursive && dry_run && verbose && parsable);
        assert_eq!(dataset, "tank/a@x%y");
        let Command::Hold { recursive, tag, snapshots } = parse("hold -r keep tank/a@x tank/a@y").unwrap().command else { panic!() };
        assert!(recursive);
        assert_eq!((tag.as_str(), snapshots.len()), ("keep", 2));
        assert!(matches!(parse("release keep tank/a@x").unwrap().command, Command::Release { .. }));
        assert!(matches!(parse("holds -H -r tank/a@x").unwrap().command, Command::Holds { scripted: true, recursive: true, .. }));
        assert!(parse("list -t snapshot -o name,used,refer -p -H").is_ok());
        assert!(parse("get -t snapshot -r used tank").is_ok());
        usage_error("snapshot");
        usage_error("snapshot -x tank@a");
        usage_error("rollback");
        usage_error("rollback tank@a tank@b");
        usage_error("hold keep");
        usage_error("release keep");
        usage_error("holds");
    }

    #[test]
    fn parses_bookmark() {
        let Command::Bookmark { source, bookmark } = parse("bookmark tank/a@x tank/a#x").unwrap().command else { panic!() };
        assert_eq!((source.as_str(), bookmark.as_str()), ("tank/a@x", "tank/a#x"));
        assert!(matches!(parse("bookmark tank/a#x #y").unwrap().command, Command::Bookmark { .. }));
        assert!(parse("list -t bookmark -o name,guid,createtxg").is_ok());
        assert!(parse("list -t all -r tank").is_ok());
        assert!(parse("destroy tank/a#x").is_ok());
        usage_error("bookmark");
        usage_error("bookmark tank/a@x");
        usage_error("bookmark tank/a@x tank/a#x tank/a#y");
        usage_error("bookmark -r tank/a@x tank/a#x");
    }

    #[test]
    fn parses_clone_and_promote() {
        let Command::Clone { props, snapshot, target } =
            parse("clone -o compression=off -o atime=off tank/a@x tank/b").unwrap().command
        else {
            panic!()
        };
        assert_eq!(props, vec![("compression".to_string(), "off".to_string()), ("atime".to_string(), "off".to_string())]);
        assert_eq!((snapshot.as_str(), target.as_str()), ("tank/a@x", "tank/b"));
        let Command::Promote { dataset } = parse("promote tank/b").unwrap().command else { panic!() };
        assert_eq!(dataset, "tank/b");
        usage_error("clone");
        usage_error("clone tank/a@x");
        usage_error("clone tank/a@x tank/b tank/c");
        usage_error("clone -o compression tank/a@x tank/b");
        usage_error("promote");
        usage_error("promote tank/a tank/b");
    }

    #[test]
    fn parses_the_pool_verbs_of_issue_9() {
        let Command::Pool(PoolCommand::Iostat { verbose, latency, scripted, parsable, json, skip_first, args }) =
            parse("pool iostat -v -l -H -p -j -y tank 1 2").unwrap().command
        else {
            panic!()
        };
        assert!(verbose && latency && scripted && parsable && json && skip_first);
        assert_eq!(args, vec!["tank", "1", "2"]);
        assert!(matches!(parse("pool iostat").unwrap().command, Command::Pool(PoolCommand::Iostat { .. })));
        let Command::Pool(PoolCommand::History { internal, long, pools }) = parse("pool history -i -l tank").unwrap().command else { panic!() };
        assert!(internal && long);
        assert_eq!(pools, vec!["tank"]);
        assert!(matches!(parse("pool status -x").unwrap().command, Command::Pool(PoolCommand::Status { unhealthy: true, .. })));
        assert!(matches!(parse("pool list -v -H").unwrap().command, Command::Pool(PoolCommand::List { verbose: true, .. })));
        let Command::Diff { classify, scripted, timestamps, no_mangle, snapshot, target, .. } =
            parse("diff -F -H -t -h tank@a tank@b").unwrap().command
        else {
            panic!()
        };
        assert!(classify && scripted && timestamps && no_mangle);
        assert_eq!((snapshot.as_str(), target.as_deref()), ("tank@a", Some("tank@b")));
        assert!(matches!(parse("diff tank@a").unwrap().command, Command::Diff { target: None, .. }));
        usage_error("diff");
        usage_error("diff -h");
        usage_error("diff tank@a tank@b tank");
        usage_error("pool iostat -x");
        usage_error("pool iostat tank -1");
        usage_error("pool history -j");
        // --help still works on diff, whose -h is zfs's.
        let help = parse("diff --help").expect_err("help");
        assert!(!help.use_stderr());
    }

    #[test]
    fn set_splits_assignments_and_dataset() {
        let Command::Set { force, args } = parse("set a=1 b=2 tank").unwrap().command else { panic!() };
        assert_eq!(args, vec!["a=1", "b=2", "tank"]);
        assert!(!force);
        let Command::Set { force, .. } = parse("set -f volsize=1G tank/vol").unwrap().command else { panic!() };
        assert!(force);
    }
}
