#!/usr/bin/env bash
# The L2ARC row of issue 11: random 4 KiB reads of a working set twice
# arc_max, with a cache device and without, same machine, same run.
#
#   bench/l2arc.sh [--systems tarn,zfs-fuse] [--size 512M] [--arc 256]
#                  [--runtime 60] [--jobs 1] [--cache /dev/shm/tarn-l2arc]
#                  [--workdir DIR] [--tarn BIN]
#
# Per system, twice (no cache device, then a cache device on --cache, a
# file made as a 2 GiB sparse file: memory standing in for a fast NVMe
# device in front of the pool's disk): a pool (raidz1 of 4 sparse files
# on the disk under --workdir, as bench/systems.sh makes them) with the
# ARC capped at --arc MiB, a dataset with recordsize=16K and compression
# off, one file of --size (2x the ARC by default) laid out by
# bench/fio/seq-write.fio; a warm-up (tarn: l2arc_write_max raised to 1G,
# the file read at random until the cache device's size stops growing,
# then l2arc_write_max back to its default 8M); then
# bench/fio/rand-read-direct.fio (O_DIRECT 4 KiB random reads, --jobs
# readers) for --runtime seconds.
#
# The pool's vdevs are files on ext4, so their reads would be answered by
# the host's page cache (24 GiB here) after the first pass and the "pool"
# would be RAM: during every read phase the page cache is dropped every
# 0.5 s (`echo 1 > drop_caches`; a tmpfs cache device is not dropped),
# so pool reads mostly go to the disk, as they would on a NAS.
#
# zfs-fuse (Debian's, pool version 23) gets --max-arc-size and the same
# file as its cache device, through a loop device (it takes no plain file
# there); it disables its page cache (--disable-page-cache) so its reads
# reach its ARC. Prints a markdown table; not a test, never fails
# on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

systems="tarn,zfs-fuse"
size="512M"
arc_mib="256"
runtime="60"
jobs="1"
cache_file="/dev/shm/tarn-l2arc"
workdir="/var/tmp/tarn-bench"
tarn_override=""
while [ $# -gt 0 ]; do
    case "$1" in
        --systems) systems="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --arc) arc_mib="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --cache) cache_file="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --tarn) tarn_override="$2"; shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "bench/l2arc.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/l2arc.sh: needs root (mounts)" >&2; exit 1; }
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))
# shellcheck source=bench/systems.sh
. bench/systems.sh
install_missing
[ -z "$tarn_override" ] || tarn_bin=$(realpath "$tarn_override")
results="$workdir/l2arc.tsv"
: > "$results"

dropper_pid=""
drop_loop_start() { ( while true; do echo 1 > /proc/sys/vm/drop_caches; sleep 0.5; done ) & dropper_pid=$!; }
drop_loop_stop() { [ -z "$dropper_pid" ] || { kill "$dropper_pid" 2>/dev/null || true; wait "$dropper_pid" 2>/dev/null || true; dropper_pid=""; }; }
trap 'drop_loop_stop; system_stop_all; rm -f "$cache_file"' EXIT

randread() {
    local dir=$1 seconds=$2 json="$workdir/l2arc-read.json"
    BENCH_DIR="$dir" BENCH_SIZE="$size" BENCH_RUNTIME="$seconds" BENCH_JOBS="$jobs" \
        fio --output-format=json --output="$json" bench/fio/rand-read-direct.fio >/dev/null
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f" % sum(j["read"]["iops"] for j in d["jobs"]))' "$json"
}

arcstat_field() { tarn arcstat -j | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

run_tarn() {
    local with_cache=$1
    tarn_cache=""
    if [ "$with_cache" = yes ]; then rm -f "$cache_file"; truncate -s 2G "$cache_file"; tarn_cache=$cache_file; fi
    system_start tarn
    tarn tunable set arc_max="${arc_mib}M"
    tarn set recordsize=16K compression=off tbtarn
    BENCH_DIR="$mnt" BENCH_SIZE="$size" fio --output=/dev/null bench/fio/seq-write.fio
    tarn pool sync tbtarn
    local l2size="-" l2hits="-"
    if [ "$with_cache" = yes ]; then
        # Warm the cache device: read until what it holds stops growing.
        tarn tunable set l2arc_write_max=1G
        local last=0 now
        for _ in $(seq 20); do
            randread "$mnt" 10 >/dev/null
            now=$(arcstat_field l2size)
            [ "$now" -le $(( last + last / 50 )) ] && break
            last=$now
        done
        tarn tunable set l2arc_write_max=8M
    else
        randread "$mnt" 20 >/dev/null
    fi
    local hits_before miss_before
    hits_before=$(arcstat_field hits); miss_before=$(arcstat_field misses)
    local l2h_before l2m_before
    l2h_before=$(arcstat_field l2hits); l2m_before=$(arcstat_field l2miss)
    drop_loop_start
    local iops
    iops=$(randread "$mnt" "$runtime")
    drop_loop_stop
    local arc_hit arc_total l2h l2m
    arc_hit=$(( $(arcstat_field hits) - hits_before ))
    arc_total=$(( arc_hit + $(arcstat_field misses) - miss_before ))
    l2h=$(( $(arcstat_field l2hits) - l2h_before )); l2m=$(( $(arcstat_field l2miss) - l2m_before ))
    if [ "$with_cache" = yes ]; then
        l2size=$(( $(arcstat_field l2size) >> 20 ))M
        l2hits="$(( l2h * 100 / (l2h + l2m > 0 ? l2h + l2m : 1) ))%"
    fi
    printf 'tarn\t%s\t%s\t%s%%\t%s\t%s\n' "$with_cache" "$iops" "$(( arc_hit * 100 / (arc_total > 0 ? arc_total : 1) ))" "$l2hits" "$l2size" | tee -a "$results"
    system_stop tarn
    rm -f "$cache_file"
}

run_zfs() {
    local with_cache=$1
    rm -rf "$workdir/zfs"; mkdir -p "$workdir/zfs"
    for i in 1 2 3 4; do truncate -s "$vdev_size" "$workdir/zfs/d$i"; done
    local cache_arg=() cache_dev=""
    if [ "$with_cache" = yes ]; then
        # zfs-fuse takes only a block device as a cache device ("cache
        # device must be a disk or disk slice"): a loop device over the file.
        rm -f "$cache_file"; truncate -s 2G "$cache_file"
        cache_dev=$(losetup --find --show "$cache_file")
        cache_arg=(cache "$cache_dev")
    fi
    zfs-fuse --no-daemon --max-arc-size "$arc_mib" --disable-page-cache >"$workdir/zfs-fuse.log" 2>&1 &
    zfs_pid=$!
    started+=(zfs-fuse)
    sleep 2
    if ! zpool create -f -O recordsize=16K -O compression=off -m "$workdir/mnt-zfs" tbzfs raidz1 "$workdir"/zfs/d{1,2,3,4} "${cache_arg[@]}" 2>"$workdir/zpool-create.err"; then
        printf 'zfs-fuse\t%s\tzpool create failed: %s\t-\t-\t-\n' "$with_cache" "$(tr '\n' ' ' < "$workdir/zpool-create.err")" | tee -a "$results"
        system_stop zfs-fuse
        [ -z "$cache_dev" ] || losetup -d "$cache_dev"
        return
    fi
    mnt="$workdir/mnt-zfs"
    BENCH_DIR="$mnt" BENCH_SIZE="$size" fio --output=/dev/null bench/fio/seq-write.fio
    if [ "$with_cache" = yes ]; then
        # zfs-fuse's feed is fixed at 8 MiB/s (+8 boost): warm for as long
        # as the set needs at that rate, capped at 3 minutes.
        local last=0 now
        for _ in $(seq 18); do
            randread "$mnt" 10 >/dev/null || true
            now=$(zpool iostat -v tbzfs | awk -v c="$(basename "$cache_dev")" '$1 == c || $1 == "/dev/"c {print $2}')
            echo "zfs-fuse cache device holds $now" >&2
            [ "$now" = "$last" ] && break
            last=$now
        done
    else
        randread "$mnt" 20 >/dev/null || true
    fi
    drop_loop_start
    local iops
    iops=$(randread "$mnt" "$runtime" || echo "fio failed")
    drop_loop_stop
    local held="-"
    [ "$with_cache" = yes ] && held=$(zpool iostat -v tbzfs | awk -v c="$(basename "$cache_dev")" '$1 == c || $1 == "/dev/"c {print $2}')
    printf 'zfs-fuse\t%s\t%s\t-\t-\t%s\n' "$with_cache" "$iops" "$held" | tee -a "$results"
    system_stop zfs-fuse
    [ -z "$cache_dev" ] || losetup -d "$cache_dev"
    rm -f "$cache_file"
}

for system in tarn zfs-fuse; do
    has "$system" || continue
    for with_cache in ${BENCH_L2_ONLY:-no yes}; do
        case "$system" in
            tarn) run_tarn "$with_cache" ;;
            zfs-fuse) run_zfs "$with_cache" ;;
        esac
    done
done

echo
echo "Command: \`bench/l2arc.sh --systems $systems --size $size --arc $arc_mib --runtime $runtime --jobs $jobs --cache $cache_file${tarn_override:+ --tarn $tarn_override}\`  "
echo "Machine: $(machine_line); cache device: a file on $(df -T "$(dirname "$cache_file")" | awk 'NR==2 {print $2}') ($(dirname "$cache_file"))"
echo
echo "| system | cache device | random 4K read IOPS ($jobs job, O_DIRECT) | ARC hit% | L2 hit% of ARC misses | on the cache device |"
echo "|---|---|---|---|---|---|"
while IFS=$'\t' read -r s c iops arc l2 held; do
    printf '| %s | %s | %s | %s | %s | %s |\n' "$s" "$c" "$iops" "$arc" "$l2" "$held"
done < "$results"
