#!/usr/bin/env bash
# The NAS builder's encryption table (issue 12): what encryption costs.
#
#   bench/encryption.sh [--size 1G] [--runtime 20] [--arc 256] [--jobs 4]
#                       [--rounds 3] [--workdir DIR] [--tarn BIN] [--no-raw]
#                       [--sync] [--recordsizes 128K,1M] [--compressions off,lz4]
#
# One tarn pool (raidz1 of 4 sparse files on the disk under --workdir, as
# bench/systems.sh makes it), the ARC capped at --arc MiB; for each of
# recordsize 128K and 1M, compression off and lz4, and encryption off,
# aes-128-gcm and aes-256-gcm (raw keys in files), a dataset of its own
# and in it:
#   - bench/fio/seq-write.fio: one 1 MiB sequential writer of --size,
#     flushed at the end (MiB/s);
#   - cold (pool export, page cache dropped, pool import -l):
#     bench/fio/seq-read.fio, one 1 MiB sequential reader (MiB/s);
#   - bench/fio/rand-read-direct.fio: --jobs O_DIRECT 4 KiB random readers
#     for --runtime seconds (IOPS). The file is 4x the ARC, so most reads
#     miss it and read, verify, decrypt and decompress a whole record; the
#     vdev files stay in the host's page cache there (RAM standing in for
#     a fast NVMe pool, the case where OpenZFS's encryption shows).
# The data is half incompressible, half zeros-and-text (so lz4 has work).
# Then the same three on a plain directory of the disk (raw ext4) as the
# reference, unless --no-raw. Everything is measured --rounds times, the
# twelve datasets in a rotated order each round (a single pass on this
# machine moves by tens of percent with the host's writeback); the table
# gives the median of each and each encrypted row's cost against the same
# dataset unencrypted. Not a test, never fails on a number.
#
# --sync measures sync writes instead (what the sealed intent log costs),
# on recordsize 128K, no compression, encryption off / aes-128-gcm /
# aes-256-gcm, each dataset first laid out with --size by seq-write.fio:
#   - bench/fio/sync-write.fio: 4 KiB random writes, fsync after each,
#     one writer (IOPS), and sync-write-4jobs.fio: four (group commit);
#   - bench/fio/osync-seq-1m.fio: 1 MiB O_SYNC sequential writes (MiB/s;
#     whole blocks written once, the sealed log carries their pointers).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

size="1G"
runtime="20"
arc_mib="256"
jobs="4"
rounds="3"
workdir="/var/tmp/tarn-bench"
tarn_override=""
with_raw=yes
systems="tarn,raw"
mode=read
recordsizes="128K,1M"
compressions="off,lz4"
while [ $# -gt 0 ]; do
    case "$1" in
        --size) size="$2"; shift 2 ;;
        --runtime) runtime="$2"; shift 2 ;;
        --arc) arc_mib="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --tarn) tarn_override="$2"; shift 2 ;;
        --no-raw) with_raw=no; systems="tarn"; shift ;;
        --sync) mode=sync; shift ;;
        --recordsizes) recordsizes="$2"; shift 2 ;;
        --compressions) compressions="$2"; shift 2 ;;
        -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
        *) echo "bench/encryption.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/encryption.sh: needs root (mounts)" >&2; exit 1; }
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
vdev_size=$(( 8 * 1024 * 1024 * 1024 ))
# shellcheck source=bench/systems.sh
. bench/systems.sh
if command -v fio >/dev/null; then install_missing; else install_missing fio; fi
[ -z "$tarn_override" ] || tarn_bin=$(realpath "$tarn_override")
results="$workdir/encryption.tsv"
: > "$results"

# fio's buffer_compress_percentage makes half of every buffer compressible.
fio_run() {
    local job=$1 dir=$2 json="$workdir/enc-fio.json"
    BENCH_DIR="$dir" BENCH_SIZE="$size" BENCH_RUNTIME="$runtime" BENCH_JOBS="$jobs" \
        fio --output-format=json --output="$json" --buffer_compress_percentage=50 --refill_buffers "bench/fio/$job.fio" >/dev/null
    python3 - "$json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
j = d["jobs"]
if j[0]["jobname"].startswith("rand"):
    print("%.0f" % sum(x["read"]["iops"] for x in j))
elif j[0]["jobname"].startswith("sync-write"):
    print("%.0f" % sum(x["write"]["iops"] for x in j))
else:
    k = "write" if j[0]["write"]["io_bytes"] else "read"
    print("%.0f" % (sum(x[k]["bw_bytes"] for x in j) / 2**20))
PY
}

keyfile="$workdir/enc-raw.key"
head -c 32 /dev/urandom > "$keyfile"

measure_tarn() {
    local round=$1 rs=$2 comp=$3 enc=$4 name ds dir
    name="rs${rs}-${comp}-${enc}"
    ds="tbtarn/$name"
    if [ "$enc" = off ]; then
        tarn create -o recordsize="$rs" -o compression="$comp" "$ds"
    else
        tarn create -o recordsize="$rs" -o compression="$comp" -o encryption="$enc" \
            -o keyformat=raw -o keylocation="file://$keyfile" "$ds"
    fi
    dir="$mnt/$name"
    wait_mount "$dir"
    local w r iops
    w=$(fio_run seq-write "$dir")
    tarn pool export tbtarn; drop_caches
    tarn pool import -l -d "$workdir/tarn" tbtarn; wait_mount "$dir"
    r=$(fio_run seq-read "$dir")
    iops=$(fio_run rand-read-direct "$dir")
    printf 'tarn\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$rs" "$comp" "$enc" "$w" "$r" "$iops" | tee -a "$results"
    tarn destroy "$ds"
}

# --sync: the three sync-write rows of one dataset (laid out first).
measure_sync() {
    local dir=$1 s1 s4 o
    fio_run seq-write "$dir" >/dev/null
    s1=$(fio_run sync-write "$dir")
    s4=$(fio_run sync-write-4jobs "$dir")
    o=$(fio_run osync-seq-1m "$dir")
    printf '%s\t%s\t%s' "$s1" "$s4" "$o"
}

if [ "$mode" = sync ]; then
    system_start tarn
    tarn tunable set arc_max="${arc_mib}M"
    encs=(off aes-128-gcm aes-256-gcm)
    for round in $(seq "$rounds"); do
        for i in 0 1 2; do
            enc=${encs[$(( (i + round - 1) % 3 ))]}
            ds="tbtarn/sync-$enc"
            if [ "$enc" = off ]; then
                tarn create -o recordsize=128K -o compression=off "$ds"
            else
                tarn create -o recordsize=128K -o compression=off -o encryption="$enc" \
                    -o keyformat=raw -o keylocation="file://$keyfile" "$ds"
            fi
            wait_mount "$mnt/sync-$enc"
            printf 'tarn\t%s\t%s\t%s\n' "$round" "$enc" "$(measure_sync "$mnt/sync-$enc")" | tee -a "$results"
            tarn destroy "$ds"
        done
    done
    system_stop tarn
    if [ "$with_raw" = yes ]; then
        for round in $(seq "$rounds"); do
            system_start raw
            printf 'raw ext4\t%s\t-\t%s\n' "$round" "$(measure_sync "$mnt")" | tee -a "$results"
            system_stop raw
        done
    fi
    rm -f "$keyfile"
    echo
    echo "Command: \`bench/encryption.sh --sync --size $size --runtime $runtime --arc $arc_mib --rounds $rounds${tarn_override:+ --tarn $tarn_override}\`  "
    echo "Machine: $(machine_line)"
    echo
    echo "| system | encryption | 4K write+fsync IOPS, 1 job (range) | 4K write+fsync IOPS, 4 jobs | 1 MiB O_SYNC write MiB/s | cost vs unencrypted (1 job / 4 jobs / 1 MiB), medians of $rounds |"
    echo "|---|---|---|---|---|---|"
    python3 - "$results" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
runs = {}
for s, rnd, enc, a, b, c in rows:
    runs.setdefault((s, enc), []).append((float(a), float(b), float(c)))
med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in runs.items()}
for (s, enc), m in med.items():
    cost = "-"
    base = med.get((s, "off"))
    if enc not in ("off", "-") and base:
        cost = " / ".join("%+.0f%%" % ((v / b - 1) * 100) for v, b in zip(m, base))
    spread = "%d–%d" % (min(x[0] for x in runs[(s, enc)]), max(x[0] for x in runs[(s, enc)]))
    print("| %s | %s | %.0f (%s) | %.0f | %.0f | %s |" % (s, enc, m[0], spread, m[1], m[2], cost))
PY
    exit 0
fi

configs=()
for rs in ${recordsizes//,/ }; do
    for comp in ${compressions//,/ }; do
        for enc in off aes-128-gcm aes-256-gcm; do
            configs+=("$rs $comp $enc")
        done
    done
done
system_start tarn
tarn tunable set arc_max="${arc_mib}M"
for round in $(seq "$rounds"); do
    n=${#configs[@]}
    for i in $(seq 0 $(( n - 1 ))); do
        # shellcheck disable=SC2086
        measure_tarn "$round" ${configs[$(( (i + (round - 1) * 5) % n ))]}
    done
done
system_stop tarn

if [ "$with_raw" = yes ]; then
    for round in $(seq "$rounds"); do
        system_start raw
        w=$(fio_run seq-write "$mnt"); drop_caches
        r=$(fio_run seq-read "$mnt")
        iops=$(fio_run rand-read-direct "$mnt")
        printf 'raw ext4\t%s\t-\t-\t-\t%s\t%s\t%s\n' "$round" "$w" "$r" "$iops" | tee -a "$results"
        system_stop raw
    done
fi
rm -f "$keyfile"

echo
echo "Command: \`bench/encryption.sh --size $size --runtime $runtime --arc $arc_mib --jobs $jobs --rounds $rounds --recordsizes $recordsizes --compressions $compressions${tarn_override:+ --tarn $tarn_override}\`  "
echo "Machine: $(machine_line)"
echo
echo "| system | recordsize | compression | encryption | seq write MiB/s | seq read MiB/s (cold) | 4K random read IOPS ($jobs jobs, O_DIRECT; range) | cost vs unencrypted (write / read / IOPS), medians of $rounds |"
echo "|---|---|---|---|---|---|---|---|"
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
runs = {}
for s, rnd, rs, comp, enc, w, r, iops in rows:
    runs.setdefault((s, rs, comp, enc), []).append((float(w), float(r), float(iops)))
med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in runs.items()}
for (s, rs, comp, enc), m in med.items():
    cost = "-"
    base = med.get((s, rs, comp, "off"))
    if enc not in ("off", "-") and base:
        cost = " / ".join("%+.0f%%" % ((v / b - 1) * 100) for v, b in zip(m, base))
    spread = "%d–%d" % (min(x[2] for x in runs[(s, rs, comp, enc)]), max(x[2] for x in runs[(s, rs, comp, enc)]))
    print("| %s | %s | %s | %s | %.0f | %.0f | %.0f (%s) | %s |" % (s, rs, comp, enc, m[0], m[1], m[2], spread, cost))
PY
