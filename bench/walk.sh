#!/usr/bin/env bash
# Directory-walk benchmarks: tarn against a reference and its peers, same
# machine, same run (issue 9).
#
#   bench/walk.sh [--systems raw,zfs-fuse,btrfs,tarn] [--files 100000]
#                 [--repeat 3] [--tarball FILE] [--workdir DIR]
#                 [--out docs/benchmarks.md]
#
# Systems as in bench/run.sh (bench/systems.sh sets them up, all at once).
# On each: bench/tree.py builds --files small files (10 × 10 directories),
# then, each cold (export/import or unmount/mount, then drop_caches):
#   ls -lR    `ls -lR` of the tree (a stat of every entry)
#   du -sh    `du -sh` of the tree
#   find      `find . -type f | wc -l` (names and types only)
# and, with the tarball in the page cache, `tar -xf` of a source tree
#   untar     into an empty directory of the system.
# The default tarball holds the sources of tarn's own dependencies (the
# crates of Cargo.lock found in ~/.cargo/registry/src), made once per
# workdir with sorted names and fixed owners and times; its file count is
# printed. Every count is checked (find must see --files files, the untar
# as many files as the tarball holds): a wrong result is not a number.
#
# Each row runs --repeat times on every system, each run cold, the
# systems' runs interleaved; the fastest run counts (the machine may be
# shared: the fastest is the one least disturbed).
# Units: seconds (and files/s). Appends a markdown table with tarn's ratio
# to each peer to --out. Needs root. Not a test: never fails on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

systems="raw,zfs-fuse,btrfs,tarn"
files="100000"
repeat="3"
tarball=""
workdir="/var/tmp/tarn-walk"
out="docs/benchmarks.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --systems) systems="$2"; shift 2 ;;
        --files) files="$2"; shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --tarball) tarball="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "bench/walk.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command_line="bench/walk.sh --systems $systems --files $files --repeat $repeat${tarball:+ --tarball $tarball}"

[ "$(id -u)" = 0 ] || { echo "bench/walk.sh: needs root (mounts, loop devices)" >&2; exit 1; }
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))   # 4 GiB sparse per device
# shellcheck source=bench/systems.sh
. bench/systems.sh
install_missing
results="$workdir/results.tsv"
: > "$results"

# ---- the source tarball
if [ -z "$tarball" ]; then
    tarball="$workdir/sources.tar"
    if [ ! -s "$tarball" ]; then
        registry=$(ls -d "$HOME"/.cargo/registry/src/*/ 2>/dev/null | head -1)
        [ -n "$registry" ] || { echo "bench/walk.sh: no ~/.cargo/registry/src; pass --tarball" >&2; exit 1; }
        python3 - "$registry" Cargo.lock > "$workdir/sources.list" <<'PY'
import os, re, sys
registry, lock = sys.argv[1], open(sys.argv[2]).read()
for name, version in re.findall(r'\[\[package\]\]\nname = "([^"]+)"\nversion = "([^"]+)"\nsource', lock):
    if os.path.isdir(os.path.join(registry, f"{name}-{version}")):
        print(f"{name}-{version}")
PY
        tar -cf "$tarball" -C "$registry" --sort=name --owner=0 --group=0 --numeric-owner \
            --mtime=2026-01-01 -T "$workdir/sources.list"
    fi
fi
tar_files=$(tar -tvf "$tarball" | grep -c '^-')
tar_entries=$(tar -tf "$tarball" | wc -l)
tar_bytes=$(stat -c %s "$tarball")
echo "tarball $tarball: $tar_entries entries, $tar_files files, $tar_bytes bytes"

# record SYSTEM ROW SECONDS FILES
record() {
    local rate
    rate=$(python3 -c "print(f'{$4 / $3:.0f}')")
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$rate" >> "$results"
    echo "  $1 / $2: $3 s ($rate files/s)"
}
# timed CMD...: runs CMD, prints its wall time in seconds.
timed() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.2f}')"
}
count_files() { [ "$(find "$1" -type f | wc -l)" = "$2" ] || { echo "bench/walk.sh: $1 holds $(find "$1" -type f | wc -l) files, expected $2" >&2; exit 1; }; }
ls_lr() { ls -lR "$1" > "$workdir/ls.out"; }
find_count() { n=$(cd "$1" && find . -type f | wc -l); [ "$n" = "$2" ] || { echo "bench/walk.sh: find saw $n files, expected $2" >&2; exit 1; }; }
# untar_rep MNT: extracts into MNT/src-$rep.
untar_rep() { mkdir "$1/src-$rep" && tar -xf "$tarball" -C "$1/src-$rep"; }

# run_row SYSTEM ROW: one cold run of ROW on SYSTEM; appends its seconds
# to runs[SYSTEM|ROW].
declare -A mnts runs
run_row() {
    local system=$1 row=$2 m=${mnts[$1]} s
    system_cold "$system"
    case "$row" in
        "ls -lR")
            s=$(timed ls_lr "$m/tree")
            [ "$(grep -c '^-' "$workdir/ls.out")" = "$files" ] || { echo "bench/walk.sh: $system: ls -lR listed $(grep -c '^-' "$workdir/ls.out") files" >&2; exit 1; } ;;
        "du -sh") s=$(timed du -sh "$m/tree") ;;
        "find -type f") s=$(timed find_count "$m/tree" "$files") ;;
        "untar (tar -xf)")
            cat "$tarball" > /dev/null   # the source warm, the target cold
            s=$(timed untar_rep "$m")
            count_files "$m/src-$rep" "$tar_files" ;;
    esac
    runs["$system|$row"]="${runs["$system|$row"]:-}$s "
}

# All systems are up at once and the runs interleave (round r starts with
# the r-th system), so a burst of load from elsewhere on a shared machine
# hits every system alike; the fastest run of each counts.
order=()
for system in raw zfs-fuse btrfs tarn; do
    has "$system" || continue
    echo "== $system: setting up"
    system_start "$system"
    mnts[$system]=$mnt
    python3 bench/tree.py "$mnt/tree" "$files"
    order+=("$system")
done
rows=("ls -lR" "du -sh" "find -type f" "untar (tar -xf)")
for rep in $(seq "$repeat"); do
    echo "== round $rep of $repeat"
    for row in "${rows[@]}"; do
        n=${#order[@]}
        for i in $(seq 0 $((n - 1))); do
            run_row "${order[$(( (i + rep - 1) % n ))]}" "$row"
        done
    done
done
for row in "${rows[@]}"; do
    for system in "${order[@]}"; do
        all=${runs["$system|$row"]}
        best=$(printf '%s\n' $all | sort -n | head -1)
        echo "  $system / $row: runs ${all}s"
        case "$row" in untar*) record "$system" "$row" "$best" "$tar_files" ;; *) record "$system" "$row" "$best" "$files" ;; esac
    done
done
for system in "${order[@]}"; do system_stop "$system"; done

# ---- report
report=$(python3 - "$results" <<'PY'
import sys, collections
rows = collections.OrderedDict()
systems = []
for line in open(sys.argv[1]):
    system, row, seconds, rate = line.rstrip("\n").split("\t")
    rows.setdefault(row, {})[system] = (float(seconds), int(rate))
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
        cells.append(f"{v[0]:.2f} s ({v[1]:,}/s)" if v else "-")
    if "tarn" in systems:
        for p in peers:
            t, q = values.get("tarn"), values.get(p)
            cells.append(f"{t[0] / q[0]:.2f}x" if t and q and q[0] > 0 else "-")
    print("| " + " | ".join(cells) + " |")
PY
)
{
    echo
    echo "### Directory walks, run of $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$command_line\`  "
    echo "Machine: $(machine_line)  "
    echo "Tree: $files files of 1–2048 bytes in 100 directories two levels deep; tarball: $tar_files files ($tar_entries entries, $tar_bytes bytes). Each walk cold (export/import or unmount/mount, drop_caches), fastest of $repeat interleaved runs. Seconds (files/s); the ratio columns are tarn's time over the peer's (lower is better)."
    echo
    echo "$report"
} >> "$out"
echo
echo "$report"
echo "appended to $out"
