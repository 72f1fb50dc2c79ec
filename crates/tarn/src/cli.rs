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
        dataset: String,
    },
    /// Destroy a dataset.
    Destroy {
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'f')]
        force: bool,
        dataset: String,
    },
    /// List datasets.
    List {
        #[arg(short = 'r')]
        recursive: bool,
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
        #[arg(short = 'o', value_name = "FIELDS", value_parser = comma_list)]
        fields: Option<CommaList>,
        #[arg(value_parser = comma_list, value_name = "PROP[,PROP...]|all")]
        props: CommaList,
        datasets: Vec<String>,
    },
    /// Set dataset properties: PROP=VALUE... DATASET.
    Set {
        #[arg(required = true, num_args = 2.., value_name = "PROP=VALUE... DATASET")]
        args: Vec<String>,
    },
    /// Mount a dataset, or list mounts.
    Mount { dataset: Option<String> },
    /// Unmount a dataset or mountpoint.
    #[command(alias = "umount")]
    Unmount {
        #[arg(short = 'f')]
        force: bool,
        target: String,
    },
    /// Debugging aids.
    #[command(subcommand)]
    Debug(DebugCommand),
    /// Set up and start everything on this machine (daemon, pool, dataset).
    Up {
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Stop the daemon started by `tarn up`.
    Down {
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// Print the version.
    Version,
}

#[derive(Subcommand, Debug)]
pub enum DebugCommand {
    /// Walk and verify every block of a pool (like zdb -b).
    Check { pool: String },
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
        pools: Vec<String>,
    },
    Status {
        #[arg(short = 'v')]
        verbose: bool,
        #[arg(short = 'j')]
        json: bool,
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
    fn set_splits_assignments_and_dataset() {
        let Command::Set { args } = parse("set a=1 b=2 tank").unwrap().command else { panic!() };
        assert_eq!(args, vec!["a=1", "b=2", "tank"]);
    }
}
