#!/usr/bin/env bash
# The dirty-data throttle (issue 11): one writer faster than the disks
# writes sequentially for --runtime seconds (default 60) into a file larger
# than what the write-back can hold; fio logs the bandwidth of every second
# and the script prints, per system, the mean, the lowest and highest
# second, and the coefficient of variation (standard deviation / mean) of
# those per-second numbers. A stop-and-go sawtooth (writers stopped while a
# txg is written, then let go) shows as a high coefficient; the issue's
# goal for tarn is below 0.25.
#
#   bench/throttle.sh [--systems raw,tarn,zfs-fuse,btrfs] [--runtime 60]
#                     [--size 16G] [--dirty-max 256M] [--workdir DIR] [--tarn BIN]
#
# Systems as in bench/run.sh (bench/systems.sh). tarn's `dirty_data_max` is
# set to --dirty-max (default 256 MiB, below the default 512 MiB so the
# throttle is reached early; the write-back caches of the other systems are
# the kernel's and zfs-fuse's own). Each second's number is what fio's
# writer got through write(2) in that second (bench/fio/throttle.fio).
# Prints a markdown table; this is not a test and never fails on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

systems="raw,tarn"
runtime="60"
size="16G"
dirty_max="256M"
workdir="/var/tmp/tarn-bench"
tarn_override=""
while [ $# -gt 0 ]; do
    case "$1" in
        --systems) systems="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --dirty-max) dirty_max="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --tarn) tarn_override="$2"; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "bench/throttle.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/throttle.sh: needs root (mounts)" >&2; exit 1; }
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 16 * 1024 * 1024 * 1024 ))
# shellcheck source=bench/systems.sh
. bench/systems.sh
install_missing
[ -z "$tarn_override" ] || tarn_bin=$(realpath "$tarn_override")
results="$workdir/throttle.tsv"
: > "$results"

for system in raw tarn zfs-fuse btrfs; do
    has "$system" || continue
    system_start "$system"
    if [ "$system" = tarn ]; then
        tarn tunable set "dirty_data_max=$dirty_max" >/dev/null
    fi
    rm -f "$workdir"/throttle-"$system"_bw*.log
    BENCH_DIR="$mnt" BENCH_SIZE="$size" BENCH_RUNTIME="$runtime" BENCH_LOG="$workdir/throttle-$system" \
        fio --output=/dev/null bench/fio/throttle.fio
    # One line per second: time (ms), bytes/s ... (KiB/s in fio's log).
    python3 - "$system" "$workdir"/throttle-"$system"_bw*.log >> "$results" <<'EOF'
import statistics, sys
system, paths = sys.argv[1], sys.argv[2:]
per_sec = {}
for p in paths:
    for line in open(p):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 2:
            continue
        sec = int(f[0]) // 1000
        per_sec[sec] = per_sec.get(sec, 0) + int(f[1]) / 1024  # KiB/s -> MiB/s
secs = [v for k, v in sorted(per_sec.items())][1:-1]  # drop the ramp-up and the cut-off second
mean = statistics.mean(secs)
cv = statistics.pstdev(secs) / mean if mean else 0
print(f"{system}\t{len(secs)}\t{mean:.0f}\t{min(secs):.0f}\t{max(secs):.0f}\t{cv:.2f}")
EOF
    tail -1 "$results"
    rm -f "$mnt/throttle.data"
    system_stop "$system"
done

echo
echo "Command: \`bench/throttle.sh --systems $systems --runtime $runtime --size $size --dirty-max $dirty_max${tarn_override:+ --tarn $tarn_override}\`  "
echo "Machine: $(machine_line)"
echo
echo "| system | seconds | mean | lowest second | highest second | coefficient of variation |"
echo "|---|---|---|---|---|---|"
while IFS=$'\t' read -r s n mean lo hi cv; do
    printf '| %s | %s | %s MiB/s | %s MiB/s | %s MiB/s | %s |\n' "$s" "$n" "$mean" "$lo" "$hi" "$cv"
done < "$results"
