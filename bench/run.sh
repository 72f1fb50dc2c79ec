#!/usr/bin/env bash
# Benchmarks: tarn against a reference and its peers, same machine, same run.
#
#   bench/run.sh [--systems raw,zfs-fuse,btrfs,tarn] [--size 1G] [--runtime 20]
#                [--files 50000] [--workdir DIR] [--out docs/benchmarks.md]
#
# Systems (all on the disk that holds --workdir, default /var/tmp/tarn-bench;
# set up by bench/systems.sh, shared with bench/walk.sh):
#   raw       a plain directory on that disk (ext4): the reference
#   zfs-fuse  Debian's zfs-fuse, raidz1 of 4 sparse files
#   btrfs     btrfs on 4 loop devices over sparse files, -d raid5 -m raid1
#   tarn      target/release/tarn, raidz1 of 4 sparse file vdevs, FUSE mount
#
# Rows: fio jobs in bench/fio/ (sequential write 1 MiB with end_fsync,
# sequential read 1 MiB cold, random read 4 KiB at QD1 and with 4 jobs,
# random write 4 KiB) and bench/metadata.py (create/stat/unlink of --files
# small files). The sequential read is made cold by export/import (or
# unmount/mount) and dropping the page cache.
#
# Appends a markdown table, with tarn's ratio to each peer, to --out.
# Needs root. Installs fio, zfs-fuse (which pulls Debian's `fuse` 2.9 and
# conflicts with the `fuse3` package) and btrfs-progs when missing.
# This is not a test: it times things and never fails on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

systems="raw,zfs-fuse,btrfs,tarn"
size="1G"
runtime="20"
files="50000"
workdir="/var/tmp/tarn-bench"
out="docs/benchmarks.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --systems) systems="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        --files) files="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "bench/run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command_line="bench/run.sh --systems $systems --size $size --runtime $runtime --files $files"

[ "$(id -u)" = 0 ] || { echo "bench/run.sh: needs root (mounts, loop devices)" >&2; exit 1; }
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))   # 4 GiB sparse per device
# shellcheck source=bench/systems.sh
. bench/systems.sh
need=()
command -v fio >/dev/null || need+=(fio)
install_missing "${need[@]}"
results="$workdir/results.tsv"
: > "$results"
export BENCH_SIZE="$size" BENCH_RUNTIME="$runtime"

# record SYSTEM ROW VALUE UNIT
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$results"; echo "  $1 / $2: $3 $4"; }

# run_fio SYSTEM DIR JOB: prints MB/s for sequential jobs, IOPS for random ones.
run_fio() {
    local system=$1 dir=$2 job=$3 json
    json="$workdir/$system-$job.json"
    BENCH_DIR="$dir" fio --output-format=json --output="$json" "bench/fio/$job.fio" >/dev/null
    python3 - "$json" "$job" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
job = sys.argv[2]
read = sum(j["read"]["bw_bytes"] for j in data["jobs"])
write = sum(j["write"]["bw_bytes"] for j in data["jobs"])
read_iops = sum(j["read"]["iops"] for j in data["jobs"])
write_iops = sum(j["write"]["iops"] for j in data["jobs"])
if job.startswith("seq"):
    print(f"{(read + write) / 1e6:.1f}\tMB/s")
else:
    print(f"{read_iops + write_iops:.0f}\tIOPS")
PY
}

# bench_system SYSTEM: sets the system up (bench/systems.sh), runs every
# row on it, tears it down.
bench_system() {
    local system=$1 line
    system_start "$system"
    local dir=$mnt
    echo "== $system on $dir"
    line=$(run_fio "$system" "$dir" seq-write); record "$system" "seq write 1M (end_fsync)" ${line}
    system_cold "$system"
    line=$(run_fio "$system" "$dir" seq-read); record "$system" "seq read 1M (cold)" ${line}
    line=$(run_fio "$system" "$dir" rand-read-qd1); record "$system" "rand read 4K QD1" ${line}
    line=$(run_fio "$system" "$dir" rand-read-4jobs); record "$system" "rand read 4K 4 jobs" ${line}
    line=$(run_fio "$system" "$dir" rand-write); record "$system" "rand write 4K" ${line}
    rm -f "$dir/bench.data"
    local ops
    ops=$(python3 bench/metadata.py "$dir" "$files" | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["cycle_ops_per_s"])')
    record "$system" "create/stat/unlink $files files" "$ops" "ops/s"
    system_stop "$system"
}

for system in raw zfs-fuse btrfs tarn; do
    has "$system" && bench_system "$system"
done

# ---- report
machine=$(machine_line)
report=$(python3 - "$results" <<'PY'
import sys, collections
rows = collections.OrderedDict()
systems = []
for line in open(sys.argv[1]):
    system, row, value, unit = line.rstrip("\n").split("\t")
    rows.setdefault(row, {})[system] = (float(value), unit)
    if system not in systems:
        systems.append(system)
peers = [s for s in systems if s != "tarn"]
head = ["row"] + systems + ([f"tarn / {p}" for p in peers] if "tarn" in systems else [])
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for row, values in rows.items():
    cells = [row]
    for s in systems:
        v = values.get(s)
        cells.append(f"{v[0]:,.0f} {v[1]}" if v and v[0] >= 100 else (f"{v[0]:.1f} {v[1]}" if v else "-"))
    if "tarn" in systems:
        for p in peers:
            t, q = values.get("tarn"), values.get(p)
            cells.append(f"{t[0] / q[0]:.2f}x" if t and q and q[0] > 0 else "-")
    print("| " + " | ".join(cells) + " |")
PY
)
{
    echo
    echo "## Run of $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$command_line\`  "
    echo "Machine: $machine  "
    echo "Sizes: fio file $size, $runtime s per random job, 4 devices of $((vdev_size >> 30)) GiB (sparse) per pool."
    echo
    echo "$report"
} >> "$out"
echo
echo "$report"
echo "appended to $out"
