#!/usr/bin/env bash
# Scrub speed: how close a scrub gets to the devices' sequential read speed.
#
#   bench/scrub.sh [--data 2G] [--workdir DIR] [--systems raw,zfs-fuse,tarn]
#                  [--out docs/benchmarks.md]
#
# raidz1 of 4 sparse file vdevs (4 GiB each) on the disk that holds
# --workdir; --data of incompressible files written through the mount
# (fio, 1 MiB sequential writes, 8 files), then export/import and dropped
# page caches, then one timed scrub:
#   raw       the reference: four plain files holding as many bytes as
#             tarn's four devices have allocated, read at the same time (one
#             `dd bs=1M` each, page cache dropped) — the aggregate sequential
#             read bandwidth of the disk for what a scrub has to read
#   zfs-fuse  `zpool scrub` of the same layout and data, time until
#             `zpool status` says it is done
#   tarn      `tarn pool scrub -w`, bytes read as `pool status -j` reports
#
# The rate is bytes read from the devices / wall time. Appends a table to
# --out. Needs root. This is a benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
data="2G"
workdir="/var/tmp/tarn-bench-scrub"
systems="raw,zfs-fuse,tarn"
out="docs/benchmarks.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --data) data="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --systems) systems="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "bench/scrub.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/scrub.sh: needs root" >&2; exit 1; }
has() { case ",$systems," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
need=()
command -v fio >/dev/null || need+=(fio)
if has zfs-fuse && ! command -v zfs-fuse >/dev/null; then need+=(zfs-fuse); fi
if [ ${#need[@]} -gt 0 ]; then apt-get update -q; DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" </dev/null; fi

mkdir -p "$workdir"; workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
results="$workdir/results.tsv"; : > "$results"
fill() {   # fill MOUNTPOINT: --data of random data in 8 files
    fio --name=fill --directory="$1" --rw=write --bs=1M --size="$data" --nrfiles=8 --numjobs=1 \
        --refill_buffers --end_fsync=1 --output=/dev/null
}
allocated_on_devices() { du -cB1 "$@" | awk 'END {print $1}'; }

# ---- tarn (first, so raw can read the very same files afterwards)
tarn_bin="$repo/target/release/tarn"
tarn() { "$tarn_bin" --socket "$workdir/tarn.sock" "$@"; }
tarn_pid=""
tarn_stop() {
    tarn pool export tbscrub 2>/dev/null || true
    if [ -n "$tarn_pid" ]; then kill "$tarn_pid" 2>/dev/null || true; wait "$tarn_pid" 2>/dev/null || true; fi
    umount -l "$workdir/mnt-tarn" 2>/dev/null || true
}
wait_mount() { for _ in $(seq 100); do mountpoint -q "$1" && return 0; sleep 0.1; done; return 1; }
rm -rf "$workdir/tarn" "$workdir/tarn-state"; mkdir -p "$workdir/tarn" "$workdir/tarn-state"
for i in 1 2 3 4; do truncate -s "$vdev_size" "$workdir/tarn/d$i"; done
[ -x "$tarn_bin" ] || cargo build -j2 --release -p tarn
rm -f "$workdir/tarn.sock"
"$tarn_bin" daemon --state-dir "$workdir/tarn-state" --socket "$workdir/tarn.sock" >"$workdir/tarn-daemon.log" 2>&1 &
tarn_pid=$!
trap tarn_stop EXIT
for _ in $(seq 100); do tarn pool list >/dev/null 2>&1 && break; sleep 0.1; done
tarn pool create -m "$workdir/mnt-tarn" -O compression=off tbscrub raidz1 "$workdir"/tarn/d{1,2,3,4}
wait_mount "$workdir/mnt-tarn"
fill "$workdir/mnt-tarn"
tarn pool export tbscrub; drop_caches; tarn pool import -d "$workdir/tarn" tbscrub; wait_mount "$workdir/mnt-tarn"
if has tarn; then
    t0=$(now); tarn pool scrub -w tbscrub; t1=$(now)
    read_bytes=$(tarn pool status -j tbscrub | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d["pools"]["tbscrub"]["scan_stats"]; print(s.get("read_bytes", s.get("issued", 0)))')
    echo -e "tarn\t$read_bytes\t$(echo "$t1 - $t0" | bc)" >> "$results"
fi
tarn pool export tbscrub
kill "$tarn_pid"; wait "$tarn_pid" 2>/dev/null || true; tarn_pid=""
trap - EXIT

# ---- raw: four plain files holding as many bytes as tarn's devices hold,
# read all at once (the devices' aggregate sequential read bandwidth)
if has raw; then
    bytes=$(allocated_on_devices "$workdir"/tarn/d{1,2,3,4})
    per=$(( bytes / 4 / 1048576 ))
    mkdir -p "$workdir/raw"
    fio --name=rawfill --directory="$workdir/raw" --rw=write --bs=1M --size="${per}M" --numjobs=4 \
        --refill_buffers --end_fsync=1 --output=/dev/null
    drop_caches
    t0=$(now)
    for f in "$workdir"/raw/rawfill.*; do dd if="$f" of=/dev/null bs=1M status=none & done
    wait
    t1=$(now)
    echo -e "raw\t$(( per * 4 * 1048576 ))\t$(echo "$t1 - $t0" | bc)" >> "$results"
    rm -rf "$workdir/raw"
fi
rm -rf "$workdir/tarn" "$workdir/tarn-state"

# ---- zfs-fuse
if has zfs-fuse; then
    rm -rf "$workdir/zfs"; mkdir -p "$workdir/zfs"
    for i in 1 2 3 4; do truncate -s "$vdev_size" "$workdir/zfs/d$i"; done
    zfs_pid=""
    if ! zpool list >/dev/null 2>&1; then zfs-fuse --no-daemon >"$workdir/zfs-fuse.log" 2>&1 & zfs_pid=$!; sleep 2; fi
    zpool create -f -m "$workdir/mnt-zfs" tbscrubz raidz1 "$workdir"/zfs/d{1,2,3,4}
    zfs set compression=off tbscrubz
    fill "$workdir/mnt-zfs"
    zpool export tbscrubz; drop_caches; zpool import -d "$workdir/zfs" tbscrubz
    bytes=$(allocated_on_devices "$workdir"/zfs/d{1,2,3,4})
    t0=$(now); zpool scrub tbscrubz
    while zpool status tbscrubz | grep -q "in progress"; do sleep 0.2; done
    t1=$(now)
    echo -e "zfs-fuse\t$bytes\t$(echo "$t1 - $t0" | bc)" >> "$results"
    zpool destroy tbscrubz || true
    if [ -n "$zfs_pid" ]; then kill "$zfs_pid" || true; wait "$zfs_pid" 2>/dev/null || true; fi
    rm -rf "$workdir/zfs"
fi

disk=$(df -T "$workdir" | awk 'NR==2 {print $1 " (" $2 ")"}')
machine="$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r), disk $disk"
python3 - "$results" "$data" "$machine" <<'PY' | tee -a "$out"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
data, machine = sys.argv[2], sys.argv[3]
rate = {name: float(b) / float(t) / 1e6 for name, b, t in rows}
print(f"\n### Scrub speed — bench/scrub.sh --data {data}\n")
print(f"Machine: {machine}. raidz1 of 4 file vdevs; {data} of incompressible data; caches dropped before each run.\n")
print("| system | bytes read | seconds | MB/s | vs raw |")
print("|---|---:|---:|---:|---:|")
for name, b, t in rows:
    vs = f"{rate[name] / rate['raw'] * 100:.0f}%" if "raw" in rate else "-"
    print(f"| {name} | {int(float(b)):,} | {float(t):.2f} | {rate[name]:.0f} | {vs} |")
PY
