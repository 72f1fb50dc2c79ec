#!/usr/bin/env bash
# Memory of the tarn daemon under load: its resident set size (VmRSS of
# /proc/PID/status, sampled every 0.2 s) through a sequence of workloads on
# a raidz1 of 4 sparse files mounted through FUSE, with a small ARC.
#
#   bench/memory.sh [--arc-max 256M] [--dirty-max 64M] [--size 1536M]
#                   [--runtime 20] [--files 20000] [--tarn BIN]
#                   [--workdir DIR] [--out docs/benchmarks.md]
#
# Phases, in order (the page cache is dropped before each read phase, so
# the reads reach the daemon):
#   write      fio: one file of --size, sequential 1 MiB writes, end_fsync
#   seqread1   fio: the file read sequentially in 1 MiB requests
#   seqread2   the same again (issue 9: RSS grew on the second pass)
#   randread   fio: 4 KiB random reads, 4 jobs, --runtime seconds
#   create     --files files of 4 KiB in 100 directories
#   walk       after export/import: find + stat of every file
#   export     the pool exported; RSS sampled 5 s more
#
# Prints, and appends to --out, a table: per phase the largest and the
# last RSS, and the bound `arc_max + dirty_data_max + overhead` documented
# in docs/tuning.md. The raw samples stay in WORKDIR/rss.tsv. Needs root.
# This is not a test: it measures and never fails on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

arc_max="256M"
dirty_max="64M"
size="1536M"
runtime="20"
files="20000"
tarn_bin="$repo/target/release/tarn"
workdir="/var/tmp/tarn-bench-memory"
out="docs/benchmarks.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --arc-max) arc_max="$2"; shift 2 ;;
        --dirty-max) dirty_max="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        --files) files="$2"; shift 2 ;;
        --tarn) tarn_bin="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "bench/memory.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command_line="bench/memory.sh --arc-max $arc_max --dirty-max $dirty_max --size $size --runtime $runtime --files $files"

[ "$(id -u)" = 0 ] || { echo "bench/memory.sh: needs root (mounts)" >&2; exit 1; }
command -v fio >/dev/null || { apt-get update -q; DEBIAN_FRONTEND=noninteractive apt-get install -y -q fio </dev/null; }
[ -x "$tarn_bin" ] || cargo build -j2 --release -p tarn

# The fixed overhead the bound allows (docs/tuning.md).
overhead_mib=160
bytes() { numfmt --from=iec "${1%B}"; }
bound_mib=$(( ($(bytes "$arc_max") + $(bytes "$dirty_max")) / 1048576 + overhead_mib ))

tarn() { "$tarn_bin" --socket "$workdir/tarn.sock" "$@"; }
mnt="$workdir/mnt"
daemon_pid=""
sampler_pid=""
cleanup() {
    [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null || true
    tarn pool export tbmem 2>/dev/null || true
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
    umount -l "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
wait_mount() { for _ in $(seq 100); do mountpoint -q "$1" && return 0; sleep 0.1; done; echo "no mount at $1" >&2; return 1; }
phase() { echo "$1" > "$workdir/phase.tmp"; mv "$workdir/phase.tmp" "$workdir/phase"; echo "== $1" >&2; }

cleanup
rm -rf "$workdir"; mkdir -p "$workdir/vdevs" "$workdir/state"
for i in 1 2 3 4; do truncate -s 2G "$workdir/vdevs/d$i"; done
printf '[tunables]\narc_max = "%s"\ndirty_data_max = "%s"\n' "$arc_max" "$dirty_max" > "$workdir/tarn.toml"
"$tarn_bin" daemon --state-dir "$workdir/state" --socket "$workdir/tarn.sock" --config "$workdir/tarn.toml" \
    >"$workdir/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$workdir/tarn.sock" ] && break; sleep 0.1; done
phase start
(
    start=$(date +%s.%N)
    current=start
    while kill -0 "$daemon_pid" 2>/dev/null; do
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$daemon_pid/status" 2>/dev/null || echo 0)
        read -r p < "$workdir/phase" 2>/dev/null || p=""
        [ -n "$p" ] && current=$p   # the file may be caught half-written
        printf '%.1f\t%s\t%s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$current" "$rss"
        sleep 0.2
    done
) > "$workdir/rss.tsv" &
sampler_pid=$!

tarn pool create -m "$mnt" tbmem raidz1 "$workdir"/vdevs/d{1,2,3,4}
wait_mount "$mnt"
fio_common=(--ioengine=psync --group_reporting --output-format=terse --terse-version=3 --directory="$mnt" --filename=big)
# fio's terse v3: field 7 is the read bandwidth, 48 the write bandwidth (KiB/s).
bandwidth() { awk -F';' '{ printf "%.0f", ($7 + $48) * 1024 / 1e6 }' > "$workdir/mbps.$1"; }

phase write
fio --name=write --rw=write --bs=1M --size="$size" --end_fsync=1 "${fio_common[@]}" | bandwidth write
for pass in 1 2; do
    drop_caches
    phase "seqread$pass"
    fio --name=seqread --rw=read --bs=1M --size="$size" "${fio_common[@]}" | bandwidth "seqread$pass"
done
drop_caches
phase randread
fio --name=randread --rw=randread --bs=4k --size="$size" --numjobs=4 --time_based --runtime="$runtime" \
    "${fio_common[@]}" | bandwidth randread
phase create
python3 - "$mnt/tree" "$files" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
block = os.urandom(4096)
for d in range(100):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
for i in range(n):
    with open(f"{root}/d{i % 100}/f{i}", "wb") as f:
        f.write(block)
EOF
sync
tarn pool export tbmem
drop_caches
tarn pool import -d "$workdir/vdevs" tbmem
wait_mount "$mnt"
phase walk
find "$mnt/tree" -type f -print0 | xargs -0 stat --format=%s >/dev/null
phase export
tarn pool export tbmem
sleep 5
phase end
sleep 0.5
kill "$sampler_pid" 2>/dev/null || true; sampler_pid=""

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
mem=$(free -g | awk '/^Mem:/ {print $2 " GiB"}')
table=$(awk -F'\t' -v bound="$bound_mib" -v dir="$workdir" '
    { if (!($2 in max) || $3 > max[$2]) max[$2] = $3; last[$2] = $3; if (!($2 in seen)) { seen[$2] = 1; order[n++] = $2 } }
    END {
        printf "| phase | max RSS MiB | last RSS MiB | bound MiB | fio MB/s |\n|---|---:|---:|---:|---:|\n"
        for (i = 0; i < n; i++) { p = order[i]; if (p == "end") continue
            mbps = "-"; f = dir "/mbps." p; if ((getline line < f) > 0) mbps = line
            printf "| %s | %d | %d | %d | %s |\n", p, max[p] / 1024, last[p] / 1024, bound, mbps }
    }' "$workdir/rss.tsv")
report="
### Daemon memory (bench/memory.sh), $(date -u +%Y-%m-%d)

Command: \`$command_line\` ($(basename "$tarn_bin") at $(git -C "$repo" rev-parse --short HEAD))${MIMALLOC_PURGE_DELAY:+, MIMALLOC_PURGE_DELAY=$MIMALLOC_PURGE_DELAY}${MIMALLOC_ALLOW_THP:+, MIMALLOC_ALLOW_THP=$MIMALLOC_ALLOW_THP}.
Machine: $cpu, $(nproc) cores, $mem RAM, $(uname -r); raidz1 of 4 sparse files on $(df --output=fstype "$workdir" | tail -1).
Bound: arc_max + dirty_data_max + ${overhead_mib} MiB (docs/tuning.md).

$table
"
echo "$report"
[ -n "$out" ] && echo "$report" >> "$out"
