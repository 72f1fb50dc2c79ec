#!/usr/bin/env bash
# NFS benchmarks: tarn's NFS server against nfs-ganesha over ext4 and
# tarn's own FUSE mount, same machine, same run, same client (issue 10).
#
#   bench/nfs.sh [--systems ext4,ganesha,tarn-fuse,tarn-fuse-uncached,tarn-nfs] [--size 2G]
#                [--runtime 20] [--files 20000] [--workdir DIR]
#                [--out docs/benchmarks.md]
#
# The client is bench/nfsload (built here, release): NFSv3 over TCP with no
# kernel NFS client, several connections and many calls in flight; with
# --local it runs the same workloads with system calls on a directory.
# Systems (data under --workdir, default /var/tmp/tarn-nfs-bench, ext4):
#   ext4       nfsload --local on a plain ext4 directory (reference, no network)
#   ganesha    Debian's nfs-ganesha 4.3, VFS FSAL exporting an ext4 directory,
#              NFSv3 over TCP only, no_root_squash
#   tarn-fuse  nfsload --local on tarn's FUSE mount (raidz1 of 4 sparse
#              file vdevs, release build, as bench/run.sh)
#   tarn-fuse-uncached  the same mount with nfsload --local --uncached:
#              reads with O_DIRECT and getattr with statx
#              AT_STATX_FORCE_SYNC, so every read and getattr reaches the
#              daemon as every NFS call does (column "tarn-fuse (uncached)")
#   tarn-nfs   the same pool served by tarn's NFS server in the same daemon:
#              `[nfs] listen = "127.0.0.1:42149"` in the daemon config,
#              `tarn set sharenfs=rw,no_root_squash tbnfs`, export /tbnfs
# Rows: sequential write then read of a --size file in 1 MiB requests over
# 1 connection with 8 in flight and over 8 connections with 1 in flight
# each (writes UNSTABLE, one COMMIT at the end, inside the time; reads
# follow the writes without dropping caches: they measure the server and
# the protocol, not the disk); random 4 KiB reads and writes within the
# file for --runtime s at queue depth 1 and 16 (one connection; random
# writes end with a COMMIT); create, getattr and remove of --files empty
# files in one directory, one call at a time. Every read is checked.
#
# Everything runs in a private network and mount namespace (unshare): the
# servers listen on loopback ports nobody else sees, ganesha registers with
# a private rpcbind (it refuses to start without one), and no mount
# outlives the run. Appends a markdown table to --out. Needs root; installs
# nfs-ganesha, nfs-ganesha-vfs, rpcbind and libnfs-utils when missing.
# This is not a test: it times things and never fails on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

systems="ext4,ganesha,tarn-fuse,tarn-fuse-uncached,tarn-nfs"
size="2G"
runtime="20"
files="20000"
workdir="/var/tmp/tarn-nfs-bench"
out="docs/benchmarks.md"
args=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --systems) systems="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        --files) files="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
        *) echo "bench/nfs.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command_line="bench/nfs.sh --systems $systems --size $size --runtime $runtime --files $files"
# mimalloc's variables reach the daemon (tarn's main.rs lets them win over
# its own allocator settings); a run with them says so in its command line
for v in $(env | grep -o '^MIMALLOC_[A-Z_]*=[^ ]*' || true); do command_line="$v $command_line"; done
[ -z "${TARN_BIN:-}" ] || command_line="TARN_BIN=$TARN_BIN $command_line"
has() { case ",$systems," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

[ "$(id -u)" = 0 ] || { echo "bench/nfs.sh: needs root (namespaces, FUSE)" >&2; exit 1; }

# ---- outside the namespace: install, build, then run ourselves inside one
if [ "${TARN_BENCH_NS:-}" != 1 ]; then
    need=()
    if has ganesha; then
        command -v ganesha.nfsd >/dev/null || need+=(nfs-ganesha)
        [ -e /usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so ] || need+=(nfs-ganesha-vfs)
        command -v rpcbind >/dev/null || need+=(rpcbind)
    fi
    command -v nfs-ls >/dev/null || need+=(libnfs-utils)
    if [ ${#need[@]} -gt 0 ]; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" </dev/null
    fi
    cargo build -j2 --release -p tarn-bench-nfsload
    if [ -z "${TARN_BIN:-}" ] && { has tarn-fuse || has tarn-fuse-uncached || has tarn-nfs; }; then cargo build -j2 --release -p tarn; fi
    TARN_BENCH_NS=1 exec unshare --net --mount --fork --propagation private "$0" "${args[@]}"
fi

# ---- inside: loopback up, a private /run for rpcbind
ip link set lo up
mount -t tmpfs -o size=16m tarn-bench-run /run
mkdir -p /run/rpcbind /run/ganesha
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
nfsload="$repo/target/release/nfsload"
# TARN_BIN: another build to measure (an A/B of two commits).
tarn_bin="${TARN_BIN:-$repo/target/release/tarn}"
results="$workdir/results.tsv"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$results"
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    mountpoint -q "$workdir/mnt-tarn" && umount -l "$workdir/mnt-tarn" 2>/dev/null || true
    rm -rf "$workdir/ext4" "$workdir/ganesha" "$workdir/tarn" "$workdir/tarn-state"
    umount /run 2>/dev/null || true
}
trap cleanup EXIT
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; local keep=() p; for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; pids=("${keep[@]}"); }
wait_port() { for _ in $(seq 100); do ss -ltn "sport = :$1" | grep -q LISTEN && return 0; sleep 0.1; done; return 1; }

# record SYSTEM ROW VALUE UNIT
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$results"; echo "  $1 / $2: $3 $4"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# run_rows SYSTEM NFSLOAD-TARGET-ARGS...: every row on one system.
run_rows() {
    local system=$1; shift
    local n=("$nfsload" "$@" --size "$size" --runtime "$runtime" --files "$files") j
    echo "== $system"
    "${n[@]}" cleanup >/dev/null
    j=$("${n[@]}" seq-write --conns 1 --qd 8); record "$system" "seq write 1M, 1 conn × 8" "$(field "$j" mib_per_s)" MiB/s
    j=$("${n[@]}" seq-write --conns 8 --qd 1); record "$system" "seq write 1M, 8 conns" "$(field "$j" mib_per_s)" MiB/s
    j=$("${n[@]}" seq-read --conns 1 --qd 8); record "$system" "seq read 1M, 1 conn × 8" "$(field "$j" mib_per_s)" MiB/s
    j=$("${n[@]}" seq-read --conns 8 --qd 1); record "$system" "seq read 1M, 8 conns" "$(field "$j" mib_per_s)" MiB/s
    j=$("${n[@]}" rand-read --bs 4K --qd 1); record "$system" "rand read 4K QD1" "$(field "$j" iops)" IOPS
    j=$("${n[@]}" rand-read --bs 4K --qd 16); record "$system" "rand read 4K QD16" "$(field "$j" iops)" IOPS
    j=$("${n[@]}" rand-write --bs 4K --qd 1); record "$system" "rand write 4K QD1" "$(field "$j" iops)" IOPS
    j=$("${n[@]}" rand-write --bs 4K --qd 16); record "$system" "rand write 4K QD16" "$(field "$j" iops)" IOPS
    "${n[@]}" cleanup >/dev/null
    j=$("${n[@]}" meta --qd 1)
    record "$system" "create $files files" "$(field "$j" create_per_s)" ops/s
    record "$system" "getattr $files files" "$(field "$j" getattr_per_s)" ops/s
    record "$system" "remove $files files" "$(field "$j" remove_per_s)" ops/s
    "${n[@]}" cleanup >/dev/null
}

# ---- ext4, local
if has ext4; then
    rm -rf "$workdir/ext4"; mkdir -p "$workdir/ext4"
    run_rows ext4 --local "$workdir/ext4"
    rm -rf "$workdir/ext4"
fi

# ---- nfs-ganesha, VFS FSAL over ext4
if has ganesha; then
    g="$workdir/ganesha"
    rm -rf "$g"; mkdir -p "$g/export" "$g/recovery"
    cat > "$g/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    NFS_Port = 42049;
    MNT_Port = 42048;     # MOUNT on the NFS port is not served by 4.3
    NLM_Port = 42047;
    Rquota_Port = 42046;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    Protocols = 3;
}
NFSv4 { RecoveryRoot = $g/recovery; Graceless = true; }
EXPORT {
    Export_Id = 1;
    Path = $g/export;
    Pseudo = /export;
    Access_Type = RW;
    Squash = No_Root_Squash;
    Protocols = 3;
    Transports = TCP;
    SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
    rpcbind -f & pids+=($!)
    sleep 0.3
    ganesha.nfsd -F -f "$g/ganesha.conf" -L "$g/ganesha.log" -p "$g/ganesha.pid" & gpid=$!; pids+=("$gpid")
    wait_port 42049 || { echo "bench/nfs.sh: ganesha did not start; see $g/ganesha.log" >&2; cat "$g/ganesha.log" >&2; exit 1; }
    for _ in $(seq 50); do "$nfsload" --nfs 127.0.0.1:42049 --mount-port 42048 --export "$g/export" cleanup >/dev/null 2>&1 && break; sleep 0.2; done
    run_rows ganesha --nfs 127.0.0.1:42049 --mount-port 42048 --export "$g/export"
    for p in "${pids[@]}"; do stop_pid "$p"; done
    rm -rf "$g"
fi

# ---- tarn: one pool, its FUSE mount, then its NFS server (one daemon)
tarn() { "$tarn_bin" --socket "$workdir/tarn.sock" "$@"; }
if has tarn-fuse || has tarn-fuse-uncached || has tarn-nfs; then
    rm -rf "$workdir/tarn" "$workdir/tarn-state"; mkdir -p "$workdir/tarn" "$workdir/tarn-state"
    for i in 1 2 3 4; do truncate -s "$vdev_size" "$workdir/tarn/d$i"; done
    config=()
    if has tarn-nfs; then
        # [nfs] present: the server runs; MOUNT and NFS on this one port
        printf '[nfs]\nenable = true\nlisten = "127.0.0.1:42149"\n' > "$workdir/tarn-nfs.toml"
        config=(--config "$workdir/tarn-nfs.toml")
    fi
    # A socket left by an earlier run would pass the wait below before
    # the new daemon listens.
    rm -f "$workdir/tarn.sock"
    "$tarn_bin" daemon --state-dir "$workdir/tarn-state" --socket "$workdir/tarn.sock" "${config[@]}" >"$workdir/tarn-daemon.log" 2>&1 & tpid=$!; pids+=("$tpid")
    for _ in $(seq 100); do [ -S "$workdir/tarn.sock" ] && break; sleep 0.1; done
    tarn pool create -m "$workdir/mnt-tarn" tbnfs raidz1 "$workdir"/tarn/d{1,2,3,4}
    for _ in $(seq 100); do mountpoint -q "$workdir/mnt-tarn" && break; sleep 0.1; done
    has tarn-fuse && run_rows tarn-fuse --local "$workdir/mnt-tarn"
    has tarn-fuse-uncached && run_rows "tarn-fuse (uncached)" --local "$workdir/mnt-tarn" --uncached
    if has tarn-nfs; then
        wait_port 42149 || { echo "bench/nfs.sh: tarn's NFS server does not listen on 127.0.0.1:42149" >&2; cat "$workdir/tarn-daemon.log" >&2; exit 1; }
        tarn set sharenfs=rw,no_root_squash tbnfs
        # the export is /POOL/DATASET (also reachable by its mountpoint)
        for _ in $(seq 50); do "$nfsload" --nfs 127.0.0.1:42149 --export /tbnfs cleanup >/dev/null 2>&1 && break; sleep 0.2; done
        tarn share -l
        run_rows tarn-nfs --nfs 127.0.0.1:42149 --export /tbnfs
    fi
    tarn pool destroy -f tbnfs 2>/dev/null || tarn pool export tbnfs 2>/dev/null || true
    stop_pid "$tpid"
fi

# ---- report
machine="$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r), disk $(df -T "$workdir" | awk 'NR==2 {print $1 " (" $2 ")"}')"
report=$(python3 - "$results" <<'PY'
import sys, collections
rows = collections.OrderedDict()
systems = []
for line in open(sys.argv[1]):
    system, row, value, unit = line.rstrip("\n").split("\t")
    rows.setdefault(row, {})[system] = (float(value), unit)
    if system not in systems:
        systems.append(system)
ratios = [(a, b) for a, b in [("tarn-nfs", "ganesha"), ("tarn-nfs", "tarn-fuse"), ("tarn-nfs", "tarn-fuse (uncached)"), ("tarn-fuse", "ext4")] if a in systems and b in systems]
head = ["row"] + systems + [f"{a} / {b}" for a, b in ratios]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for row, values in rows.items():
    cells = [row]
    for s in systems:
        v = values.get(s)
        cells.append(f"{v[0]:,.0f} {v[1]}" if v else "-")
    for a, b in ratios:
        x, y = values.get(a), values.get(b)
        cells.append(f"{x[0] / y[0]:.2f}x" if x and y and y[0] > 0 else "-")
    print("| " + " | ".join(cells) + " |")
PY
)
{
    echo
    echo "### NFS run of $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$command_line\`  "
    echo "Machine: $machine; load average at the start $load_start, at the end $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared with other builds)  "
    echo "Client: bench/nfsload (NFSv3 over TCP loopback, one thread per connection at one call in flight; --local for ext4 and the FUSE mount, --local --uncached for the uncached FUSE column). File $size, $runtime s per random row, $files files."
    echo
    echo "$report"
} >> "$out"
echo
echo "$report"
echo "appended to $out"
