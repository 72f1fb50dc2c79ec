#!/usr/bin/env bash
# Listing snapshots with their space: `tarn list -t snapshot -o
# name,used,refer` of one dataset with --count snapshots, each taken after
# some churn, so that every snapshot's successor has a dead list of its own
# (what a snapshot's `used` is computed from).
#
#   bench/snapshots.sh [--count 1000] [--churn 256] [--file-size 256M]
#                      [--rounds 5] [--workdir DIR]
#                      [--systems tarn,zfs-fuse,btrfs] [--tarn [LABEL=]BIN,...]
#                      [--out docs/benchmarks.md]
#
# Each system gets the layout of bench/systems.sh (raidz1 of 4 sparse
# files; btrfs raid5 on 4 loop devices) and one dataset (tarn, zfs-fuse:
# recordsize=16K, compression off; btrfs: a subvolume) holding one file of
# --file-size random bytes. Then --count times: --churn random 16 KiB
# blocks of the file are rewritten, and a snapshot is taken. Timed (wall
# clock of the whole command, output to /dev/null):
#   cold   the first listing after export/import (btrfs: unmount/mount)
#          and dropped page caches
#   warm   the next --rounds listings (the median is reported)
# The listings: tarn `list -t snapshot -o name,used,refer DATASET`;
# zfs-fuse `zfs list -t snapshot -o name,used,refer -r DATASET`; btrfs
# `btrfs subvolume list -s` plus `btrfs qgroup show` (quotas enabled
# before the first snapshot: a snapshot's exclusive bytes are its `used`).
# --tarn takes one or more tarn binaries, each with an optional label
# (e.g. `before=/tmp/tarn-old,after=target/release/tarn`), each measured
# on a pool of its own made the same way. Appends a table to --out. Needs
# root. A benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
count=1000
churn=256
file_size="256M"
rounds=5
workdir="/var/tmp/tarn-bench-snapshots"
systems="tarn,zfs-fuse,btrfs"
tarn_bins="$repo/target/release/tarn"
out="docs/benchmarks.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --count) count="$2"; shift 2 ;;
        --churn) churn="$2"; shift 2 ;;
        --file-size) file_size="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --systems) systems="$2"; shift 2 ;;
        --tarn) tarn_bins="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
        *) echo "bench/snapshots.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/snapshots.sh: needs root (mounts, loop devices)" >&2; exit 1; }
case "$count$churn$rounds" in *[!0-9]*) echo "bench/snapshots.sh: --count, --churn and --rounds are numbers" >&2; exit 2 ;; esac
command_line="bench/snapshots.sh --count $count --churn $churn --file-size $file_size --rounds $rounds --systems $systems"
mkdir -p "$workdir"; workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))
# shellcheck source=bench/systems.sh
. bench/systems.sh
install_missing
results="$workdir/results.tsv"; : > "$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# fill_and_churn FILE SNAPSHOT-COMMAND...: writes FILE, then --count times
# rewrites --churn random 16 KiB blocks and runs the snapshot command with
# the snapshot's number appended to its last word (one process: no
# start-up per snapshot).
fill_and_churn() {
    python3 - "$file_size" "$count" "$churn" "$@" <<'PY'
import os, random, subprocess, sys
size_text, count, churn, path, *snap = sys.argv[1:]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
size = int(size_text[:-1]) * units[size_text[-1]] if size_text[-1] in units else int(size_text)
block = 16 << 10
rng = random.Random(14)
with open(path, "wb") as f:
    for _ in range(size // (1 << 20)):
        f.write(os.urandom(1 << 20))
    f.flush(); os.fsync(f.fileno())
fd = os.open(path, os.O_RDWR)
for i in range(1, int(count) + 1):
    for _ in range(int(churn)):
        os.pwrite(fd, os.urandom(block), rng.randrange(size // block) * block)
    os.fsync(fd)
    subprocess.run([*snap[:-1], snap[-1] + str(i)], check=True, stdout=subprocess.DEVNULL)
    if i % 100 == 0:
        print(f"  {i} snapshots", file=sys.stderr)
os.close(fd)
PY
}

# timed SYSTEM PHASE CMD...: wall time of CMD (stdout discarded); checks
# the listing has --count lines.
timed() {
    local system="$1" phase="$2"; shift 2
    local t0 t1 lines
    t0=$(date +%s.%N)
    lines=$("$@" | wc -l)
    t1=$(date +%s.%N)
    echo -e "$system\t$phase\t$(echo "$t1 - $t0" | bc)\t$lines" >> "$results"
    echo "  $system $phase: $(echo "$t1 - $t0" | bc) s ($lines lines)"
}

measure() { # measure SYSTEM LIST-COMMAND...
    local system="$1"; shift
    timed "$system" cold "$@"
    for _ in $(seq "$rounds"); do timed "$system" warm "$@"; done
}

# ---- tarn (each binary on a pool of its own)
if has tarn; then
    IFS=',' read -r -a bins <<< "$tarn_bins"
    for entry in "${bins[@]}"; do
        label="${entry%%=*}"; tarn_bin="${entry#*=}"
        [ "$label" != "$entry" ] || label="$tarn_bin"
        [ -x "$tarn_bin" ] || { echo "bench/snapshots.sh: no tarn binary at $tarn_bin" >&2; exit 1; }
        echo "tarn ($label): $tarn_bin"
        system_start tarn
        tarn create -o recordsize=16K -o compression=off tbtarn/fs
        wait_mount "$mnt/fs"
        fill_and_churn "$mnt/fs/file" "$tarn_bin" --socket "$workdir/tarn.sock" snapshot tbtarn/fs@s
        system_cold tarn
        wait_mount "$mnt/fs"
        measure "tarn ($label)" tarn list -H -t snapshot -o name,used,refer tbtarn/fs
        system_stop tarn
    done
fi

# ---- zfs-fuse
if has zfs-fuse; then
    echo "zfs-fuse"
    system_start zfs-fuse
    zfs create -o recordsize=16K -o compression=off tbzfs/fs
    fill_and_churn "$mnt/fs/file" zfs snapshot tbzfs/fs@s
    system_cold zfs-fuse
    measure zfs-fuse zfs list -H -t snapshot -o name,used,refer -r tbzfs/fs
    system_stop zfs-fuse
fi

# ---- btrfs: snapshots as read-only subvolumes, used = qgroup exclusive
if has btrfs; then
    echo "btrfs"
    system_start btrfs
    btrfs subvolume create "$mnt/fs" >/dev/null
    btrfs quota enable "$mnt"
    mkdir -p "$mnt/snaps"
    fill_and_churn "$mnt/fs/file" btrfs subvolume snapshot -r "$mnt/fs" "$mnt/snaps/s"
    btrfs quota rescan -w "$mnt" >/dev/null 2>&1 || true
    system_cold btrfs
    btrfs_list() { btrfs subvolume list -s "$mnt" >/dev/null; btrfs qgroup show --raw "$mnt" | tail -n +3 | head -n "$count"; }
    measure btrfs btrfs_list
    system_stop btrfs
fi

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$results" "$command_line" "$(machine_line)" "$load_before" "$load_after" "$count" "$churn" "$file_size" <<'PY' | tee -a "$out"
import statistics, sys, datetime
path, command, machine, load_before, load_after, count, churn, size = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
by = {}
for system, phase, seconds, lines in rows:
    by.setdefault(system, {}).setdefault(phase, []).append((float(seconds), int(lines)))
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
print(f"\n### Snapshot listing — {now}\n")
print(f"Command: `{command}`  ")
print(f"Machine: {machine}; load average {load_before} before, {load_after} after.  ")
print(f"One dataset, {count} snapshots, {churn} random 16 KiB blocks of a {size} file rewritten before each; "
      "wall time of the whole listing command (cold: the first after export/import and dropped caches; "
      "warm: median of the next ones).\n")
print("| system | listing | cold s | warm s (median) | lines |")
print("|---|---|---:|---:|---:|")
for system, phases in by.items():
    cold = phases.get("cold", [])
    warm = phases.get("warm", [])
    listing = {"zfs-fuse": "zfs list -t snapshot -o name,used,refer", "btrfs": "btrfs subvolume list -s + qgroup show"}.get(
        system, "tarn list -t snapshot -o name,used,refer")
    c = f"{cold[0][0]:.3f}" if cold else "-"
    w = f"{statistics.median(s for s, _ in warm):.3f}" if warm else "-"
    lines = cold[0][1] if cold else "-"
    print(f"| {system} | {listing} | {c} | {w} | {lines} |")
PY
