#!/usr/bin/env bash
# Replication speed: full and incremental send, and send | recv into a
# second pool, next to zfs-fuse and btrfs on the same disk.
#
#   bench/send.sh [--data 1G] [--change 2] [--workdir DIR]
#                 [--systems raw,tarn,tarn-raw,zfs-fuse,btrfs] [--out docs/benchmarks.md]
#
# Each system gets a pool of 3 file vdevs (raidz1; btrfs: one loop device)
# holding --data of incompressible files (fio, 8 files, 1 MiB writes) and
# a snapshot; then --change percent of the files' blocks are rewritten in
# place (random 128 KiB writes) and a second snapshot is taken. Timed, page
# cache dropped before each:
#   full      send of the first snapshot to /dev/null (stream bytes / s)
#   incr      incremental send of the second from the first to /dev/null
#             (time and stream size: they should follow the change, not
#             the data)
#   recv      full send piped into a receive on a second pool on the same
#             disk (tarn: mirror of 2 file vdevs; zfs-fuse: the same;
#             btrfs: a second loop file system)
#   raw       the reference: `cat` of the same files to /dev/null, and `cp`
#             of them to another directory for "recv"
#   tarn -w   (system tarn-raw) the same on an encrypted dataset
#             (aes-256-gcm, a raw key in a file) of the tarn sender, sent
#             raw (`send -w`: ciphertext as stored, no key used) into a
#             receiver that holds no key
# Appends a table to --out. Needs root. A benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
data="1G"
change=2
workdir="/var/tmp/tarn-bench-send"
systems="raw,tarn,tarn-raw,zfs-fuse,btrfs"
out="docs/benchmarks.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --data) data="$2"; shift 2 ;;
        --change) change="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --systems) systems="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "bench/send.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/send.sh: needs root" >&2; exit 1; }
has() { case ",$systems," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
need=()
command -v fio >/dev/null || need+=(fio)
command -v bc >/dev/null || need+=(bc)
if has zfs-fuse && ! command -v zfs-fuse >/dev/null; then need+=(zfs-fuse); fi
if has btrfs && ! command -v mkfs.btrfs >/dev/null; then need+=(btrfs-progs); fi
if [ ${#need[@]} -gt 0 ]; then apt-get update -q; DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" </dev/null; fi

mkdir -p "$workdir"; workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
results="$workdir/results.tsv"; : > "$results"
fill() {   # fill DIR: --data of random data in 8 files
    fio --name=fill --directory="$1" --rw=write --bs=1M --size="$data" --nrfiles=8 --numjobs=1 \
        --refill_buffers --end_fsync=1 --output=/dev/null
}
modify() { # modify DIR: rewrite --change % of the bytes in place
    local bytes; bytes=$(du -sb "$1" | awk '{print $1}')
    local n=$(( bytes * change / 100 / 131072 ))
    fio --name=change --directory="$1" --filename_format='fill.0.$filenum' --nrfiles=8 --rw=randwrite \
        --bs=128k --io_size=$(( n * 131072 )) --size="$data" --file_service_type=random \
        --refill_buffers --end_fsync=1 --output=/dev/null
}
# timed NAME PHASE CMD...: runs CMD (its stdout counted in bytes), records a row
timed() {
    local name="$1" phase="$2"; shift 2
    drop_caches
    local t0 t1 bytes
    t0=$(now)
    bytes=$("$@" | wc -c)
    t1=$(now)
    echo -e "$name\t$phase\t$bytes\t$(echo "$t1 - $t0" | bc)" >> "$results"
}
timed_pipe() { # timed_pipe NAME SECONDS-OF CMD (a shell string; bytes = BYTES env)
    local name="$1" phase="$2" bytes="$3" cmd="$4"
    drop_caches
    local t0 t1
    t0=$(now)
    bash -c "$cmd"
    sync
    t1=$(now)
    echo -e "$name\t$phase\t$bytes\t$(echo "$t1 - $t0" | bc)" >> "$results"
}
wait_mount() { for _ in $(seq 100); do mountpoint -q "$1" && return 0; sleep 0.1; done; return 1; }

# ---- raw
if has raw; then
    rm -rf "$workdir/raw" "$workdir/raw-copy"; mkdir -p "$workdir/raw" "$workdir/raw-copy"
    fill "$workdir/raw"
    timed raw full cat "$workdir"/raw/*
    timed_pipe raw recv "$(du -sb "$workdir/raw" | awk '{print $1}')" "cp $workdir/raw/* $workdir/raw-copy/"
    rm -rf "$workdir/raw" "$workdir/raw-copy"
fi

# ---- tarn (and tarn-raw: an encrypted dataset of the same pools, sent -w)
if has tarn || has tarn-raw; then
    tarn_bin="$repo/target/release/tarn"
    [ -x "$tarn_bin" ] || cargo build -j2 --release -p tarn
    tarn() { "$tarn_bin" --socket "$workdir/tarn.sock" "$@"; }
    rm -rf "$workdir/tarn" "$workdir/tarn-state"; mkdir -p "$workdir/tarn" "$workdir/tarn-state"
    for i in 1 2 3 b1 b2; do truncate -s "$vdev_size" "$workdir/tarn/d$i"; done
    rm -f "$workdir/tarn.sock"
    "$tarn_bin" daemon --state-dir "$workdir/tarn-state" --socket "$workdir/tarn.sock" >"$workdir/tarn-daemon.log" 2>&1 &
    tarn_pid=$!
    tarn_stop() {
        tarn pool destroy -f tbsend 2>/dev/null || true
        tarn pool destroy -f tbrecv 2>/dev/null || true
        kill "$tarn_pid" 2>/dev/null || true; wait "$tarn_pid" 2>/dev/null || true
    }
    trap tarn_stop EXIT
    for _ in $(seq 100); do tarn pool list >/dev/null 2>&1 && break; sleep 0.1; done
    tarn pool create -m "$workdir/mnt-tarn" -O compression=off tbsend raidz1 "$workdir"/tarn/d{1,2,3}
    tarn pool create -m "$workdir/mnt-tarn-b" -O compression=off tbrecv mirror "$workdir"/tarn/d{b1,b2}
    wait_mount "$workdir/mnt-tarn"
    if has tarn; then
        fill "$workdir/mnt-tarn"
        tarn snapshot tbsend@a
        modify "$workdir/mnt-tarn"
        tarn snapshot tbsend@b
        timed tarn full tarn send tbsend@a
        timed tarn incr tarn send -i @a tbsend@b
        full_bytes=$(tarn send -nP tbsend@a | awk '/^size/ {print $2}')
        timed_pipe tarn recv "$full_bytes" "$tarn_bin --socket $workdir/tarn.sock send tbsend@a | $tarn_bin --socket $workdir/tarn.sock recv -u tbrecv/copy"
        tarn destroy -r tbrecv/copy
    fi
    if has tarn-raw; then
        head -c 32 /dev/urandom > "$workdir/enc.key"
        tarn create -o encryption=aes-256-gcm -o keyformat=raw -o keylocation="file://$workdir/enc.key" tbsend/enc
        wait_mount "$workdir/mnt-tarn/enc"
        fill "$workdir/mnt-tarn/enc"
        tarn snapshot tbsend/enc@a
        modify "$workdir/mnt-tarn/enc"
        tarn snapshot tbsend/enc@b
        timed "tarn -w" full tarn send -w tbsend/enc@a
        timed "tarn -w" incr tarn send -w -i @a tbsend/enc@b
        full_bytes=$(tarn send -w tbsend/enc@a | wc -c)
        timed_pipe "tarn -w" recv "$full_bytes" "$tarn_bin --socket $workdir/tarn.sock send -w tbsend/enc@a | $tarn_bin --socket $workdir/tarn.sock recv -u tbrecv/enc"
        rm -f "$workdir/enc.key"
    fi
    tarn_stop
    trap - EXIT
    rm -rf "$workdir/tarn" "$workdir/tarn-state"
fi

# ---- zfs-fuse
if has zfs-fuse; then
    rm -rf "$workdir/zfs"; mkdir -p "$workdir/zfs"
    for i in 1 2 3 b1 b2; do truncate -s "$vdev_size" "$workdir/zfs/d$i"; done
    zfs_pid=""
    if ! zpool list >/dev/null 2>&1; then zfs-fuse --no-daemon >"$workdir/zfs-fuse.log" 2>&1 & zfs_pid=$!; sleep 2; fi
    zpool create -f -m "$workdir/mnt-zfs" tbsendz raidz1 "$workdir"/zfs/d{1,2,3}
    zpool create -f -m "$workdir/mnt-zfs-b" tbrecvz mirror "$workdir"/zfs/d{b1,b2}
    zfs set compression=off tbsendz
    fill "$workdir/mnt-zfs"
    zfs snapshot tbsendz@a
    modify "$workdir/mnt-zfs"
    zfs snapshot tbsendz@b
    timed zfs-fuse full zfs send tbsendz@a
    timed zfs-fuse incr zfs send -i @a tbsendz@b
    full_bytes=$(zfs send tbsendz@a | wc -c)
    timed_pipe zfs-fuse recv "$full_bytes" "zfs send tbsendz@a | zfs recv -u tbrecvz/copy"
    zpool destroy tbsendz || true; zpool destroy tbrecvz || true
    if [ -n "$zfs_pid" ]; then kill "$zfs_pid" || true; wait "$zfs_pid" 2>/dev/null || true; fi
    rm -rf "$workdir/zfs"
fi

# ---- btrfs (loop devices on files in the same directory)
if has btrfs; then
    rm -rf "$workdir/btrfs"; mkdir -p "$workdir/btrfs" "$workdir/mnt-btrfs" "$workdir/mnt-btrfs-b"
    truncate -s "$vdev_size" "$workdir/btrfs/a"; truncate -s "$vdev_size" "$workdir/btrfs/b"
    mkfs.btrfs -q -f "$workdir/btrfs/a"; mkfs.btrfs -q -f "$workdir/btrfs/b"
    mount -o loop "$workdir/btrfs/a" "$workdir/mnt-btrfs"; mount -o loop "$workdir/btrfs/b" "$workdir/mnt-btrfs-b"
    btrfs subvolume create "$workdir/mnt-btrfs/vol" >/dev/null
    fill "$workdir/mnt-btrfs/vol"
    btrfs subvolume snapshot -r "$workdir/mnt-btrfs/vol" "$workdir/mnt-btrfs/a" >/dev/null
    modify "$workdir/mnt-btrfs/vol"
    btrfs subvolume snapshot -r "$workdir/mnt-btrfs/vol" "$workdir/mnt-btrfs/b" >/dev/null
    sync
    timed btrfs full btrfs send -q "$workdir/mnt-btrfs/a"
    timed btrfs incr btrfs send -q -p "$workdir/mnt-btrfs/a" "$workdir/mnt-btrfs/b"
    full_bytes=$(btrfs send -q "$workdir/mnt-btrfs/a" | wc -c)
    timed_pipe btrfs recv "$full_bytes" "btrfs send -q $workdir/mnt-btrfs/a | btrfs receive -q $workdir/mnt-btrfs-b"
    umount "$workdir/mnt-btrfs" "$workdir/mnt-btrfs-b"
    rm -rf "$workdir/btrfs"
fi

disk=$(df -T "$workdir" | awk 'NR==2 {print $1 " (" $2 ")"}')
machine="$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r), disk $disk"
python3 - "$results" "$data" "$change" "$machine" <<'PY' | tee -a "$out"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
data, change, machine = sys.argv[2], sys.argv[3], sys.argv[4]
print(f"\n### Replication — bench/send.sh --data {data} --change {change}\n")
print(f"Machine: {machine}. Senders: raidz1 of 3 file vdevs (btrfs: one loop file system), "
      f"{data} of incompressible data, then {change}% of it rewritten in place; receivers: a mirror "
      f"of 2 file vdevs (btrfs: a second loop file system). Page cache dropped before each run.\n")
print("| system | full send MB/s | incremental: stream bytes | incremental: seconds | send \\| recv MB/s |")
print("|---|---:|---:|---:|---:|")
by = {}
for name, phase, b, t in rows:
    by.setdefault(name, {})[phase] = (int(b), float(t))
for name, p in by.items():
    full = p.get("full"); incr = p.get("incr"); recv = p.get("recv")
    cell = lambda x: f"{x[0] / x[1] / 1e6:.0f}" if x else "-"
    print(f"| {name} | {cell(full)} | {f'{incr[0]:,}' if incr else '-'} | {f'{incr[1]:.2f}' if incr else '-'} | {cell(recv)} |")
PY
