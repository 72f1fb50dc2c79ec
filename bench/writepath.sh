#!/usr/bin/env bash
# The write path's scaling (issue 11): random 4 KiB writes with 1 and 4
# jobs over one existing file, on raw ext4 (the reference) and tarn, same
# machine, same run.
#
#   bench/writepath.sh [--systems raw,tarn] [--size 1G] [--runtime 20]
#                      [--workdir DIR] [--perf FILE] [--perf-job JOB]
#                      [--tarn BIN] [--slog FILE]
#
# Systems as in bench/run.sh (bench/systems.sh): tarn is target/release/tarn
# on a raidz1 of 4 sparse file vdevs under a FUSE mount. Per system: the
# file is laid out by bench/fio/seq-write.fio, then bench/fio/rand-write.fio
# (1 job) and bench/fio/rand-write-4jobs.fio (4 jobs) run over it, then the
# same with an fsync after every write (bench/fio/sync-write*.fio: on tarn
# each fsync commits the dataset's intent log), and 1 MiB sequential O_SYNC
# writes (bench/fio/osync-seq-1m.fio, MiB/s); with tarn, first the disk's
# own durable 4 KiB write rate (bench/fio/disk-durable-4k.fio, one file
# and three). Before each row the file
# system writes out what the last one left dirty (`tarn pool sync`,
# `zpool sync`, `sync -f`), so no row pays for the one before it.
# With --perf FILE, `perf record -g` samples the tarn daemon during the
# 4-job row (or the row of bench/fio/JOB.fio with --perf-job JOB, e.g.
# sync-write) and writes the report (by symbol) to FILE. --tarn BIN runs
# another build of tarn (default target/release/tarn), to compare two.
# --slog FILE gives tarn's pool a log vdev (SLOG) on FILE, made as a 1 GiB
# sparse file if missing (e.g. /dev/shm/tarn-slog: memory standing in for
# a fast NVMe device). --tunable NAME=VALUE (repeatable) sets a tarn
# tunable (`tarn tunable set`) before the rows, e.g. dirty_data_max=2G.
# TARN_DAEMON_ARGS (environment, bench/systems.sh) adds words to the tarn
# daemon's command line, e.g. "--config FILE" with `[fuse] writeback_cache
# = true`.
# Prints a markdown table; this is not a test and never fails on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

systems="raw,tarn"
size="1G"
runtime="20"
workdir="/var/tmp/tarn-bench"
perf_out=""
perf_job="rand-write-4jobs"
tarn_override=""
slog=""
tunables=""
while [ $# -gt 0 ]; do
    case "$1" in
        --systems) systems="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --perf) perf_out="$2"; shift 2 ;;
        --perf-job) perf_job="$2"; shift 2 ;;
        --tarn) tarn_override="$2"; shift 2 ;;
        --slog) slog="$2"; shift 2 ;;
        --tunable) tunables="$tunables $2"; shift 2 ;;
        -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
        *) echo "bench/writepath.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/writepath.sh: needs root (mounts)" >&2; exit 1; }
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))
# shellcheck source=bench/systems.sh
. bench/systems.sh
install_missing
[ -z "$tarn_override" ] || tarn_bin=$(realpath "$tarn_override")
if [ -n "$slog" ]; then
    [ -e "$slog" ] || truncate -s 1G "$slog"
    tarn_slog=$(realpath "$slog")
fi
export BENCH_SIZE="$size" BENCH_RUNTIME="$runtime"
results="$workdir/writepath.tsv"
: > "$results"

mibs() {
    local system=$1 dir=$2 job=$3 json="$workdir/$1-$3.json"
    BENCH_DIR="$dir" fio --output-format=json --output="$json" "bench/fio/$job.fio" >/dev/null
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f" % (sum(j["write"]["bw_bytes"] for j in d["jobs"]) / 2**20))' "$json"
}

iops() {
    local system=$1 dir=$2 job=$3 json="$workdir/$1-$3.json"
    BENCH_DIR="$dir" fio --output-format=json --output="$json" "bench/fio/$job.fio" >/dev/null
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f" % sum(j["write"]["iops"] for j in d["jobs"]))' "$json"
}

# The disk itself, once, when tarn runs: what a durable 4 KiB write costs
# alone and three at once in three files (the columns of a raidz1 log
# block), bench/fio/disk-durable-4k.fio on laid-out files. Without a log
# device a tarn commit cannot be cheaper than the three-file case.
disk_line=""
if has tarn; then
    mkdir -p "$workdir/disk"
    d1=$(BENCH_FILE_SIZE=64M BENCH_JOBS=1 iops disk1 "$workdir/disk" disk-durable-4k)
    d3=$(BENCH_FILE_SIZE=64M BENCH_JOBS=3 iops disk3 "$workdir/disk" disk-durable-4k)
    rm -rf "$workdir/disk"
    disk_line="The disk: durable 4 KiB writes (O_DIRECT + O_DSYNC, laid-out files): $d1 IOPS in one file; $d3 IOPS in all over three files in parallel, so at most $(( d3 / 3 )) commits a second of a log block written as three raidz1 columns."
fi

for system in raw zfs-fuse btrfs tarn; do
    has "$system" || continue
    system_start "$system"
    dir=$mnt
    if [ "$system" = tarn ] && [ -n "$tunables" ]; then
        # shellcheck disable=SC2086
        tarn tunable set $tunables >/dev/null
    fi
    BENCH_DIR="$dir" fio --output=/dev/null bench/fio/seq-write.fio
    # One row, sampled by perf if asked for.
    row() {
        local job=$1
        if [ "$system" = tarn ] && [ -n "$perf_out" ] && [ "$job" = "$perf_job" ]; then
            perf record -g -o "$workdir/perf.data" -p "$tarn_pid" -- sleep "$(( runtime > 4 ? runtime - 2 : runtime ))" >/dev/null 2>&1 &
            local perf_pid=$!
            iops "$system" "$dir" "$job"
            wait "$perf_pid" || true
            perf report -i "$workdir/perf.data" --no-children --sort symbol --stdio > "$perf_out" 2>/dev/null || true
        else
            iops "$system" "$dir" "$job"
        fi
    }
    # Each row starts with nothing dirty: what one row left in memory is
    # written before the next starts, not during it (for every system;
    # ext4's page cache carries over as much as tarn's open txg would).
    settle() {
        case "$system" in
            tarn) tarn pool sync tbtarn >/dev/null ;;
            zfs-fuse) zpool sync tbzfs 2>/dev/null || sync ;;
            *) sync -f "$dir" ;;
        esac
    }
    settle
    one=$(row rand-write)
    settle
    four=$(row rand-write-4jobs)
    settle
    sync1=$(row sync-write)
    settle
    sync4=$(row sync-write-4jobs)
    settle
    osync=$(mibs "$system" "$dir" osync-seq-1m)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$system" "$one" "$four" "$sync1" "$sync4" "$osync" | tee -a "$results"
    rm -f "$dir/bench.data"
    system_stop "$system"
done

echo
tunable_args=""
for t in $tunables; do tunable_args="$tunable_args --tunable $t"; done
echo "Command: \`bench/writepath.sh --systems $systems --size $size --runtime $runtime${tarn_override:+ --tarn $tarn_override}${slog:+ --slog $slog}$tunable_args\`  "
echo "Machine: $(machine_line)"
echo
echo "| system | rand write 4K, 1 job | rand write 4K, 4 jobs | 4 jobs / 1 job | fsync=1, 1 job | fsync=1, 4 jobs | O_SYNC seq 1M |"
echo "|---|---|---|---|---|---|---|"
while IFS=$'\t' read -r s one four sync1 sync4 osync; do
    printf '| %s | %s IOPS | %s IOPS | %s | %s IOPS | %s IOPS | %s MiB/s |\n' "$s" "$one" "$four" "$(python3 -c "print('%.2fx' % ($four / max($one, 1)))")" "$sync1" "$sync4" "$osync"
done < "$results"
if [ -n "$disk_line" ]; then echo; echo "$disk_line"; fi
