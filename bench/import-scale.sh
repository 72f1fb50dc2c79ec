#!/usr/bin/env bash
# Scale check: create N empty files (default 1,000,000) in 1000 directories
# through the FUSE mount of a raidz1 pool, export, then time the import and
# a first `stat` of a file, and report the daemon's resident memory before
# and after. Not a test: it prints numbers for docs/benchmarks.md.
#
#   bench/import-scale.sh [N] [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"
work="${2:-/var/tmp/tarn-scale}"
tarn="$(pwd)/target/release/tarn"
[ -x "$tarn" ] || cargo build -j2 --release -p tarn
rm -rf "$work" && mkdir -p "$work"
for i in 1 2 3 4; do truncate -s 4G "$work/d$i"; done
"$tarn" daemon --state-dir "$work/state" --socket "$work/s" > "$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; umount -l "$work/mnt" 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -S "$work/s" ] && break; sleep 0.1; done
t() { "$tarn" --socket "$work/s" "$@"; }
rss() { awk '/VmRSS/ {print $2 " kB"}' /proc/$daemon/status; }
t pool create -m "$work/mnt" scale raidz1 "$work"/d{1,2,3,4}
start=$(date +%s.%N)
python3 - "$work/mnt" "$n" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range(1000):
    os.makedirs(f"{root}/d{d:03}", exist_ok=True)
for i in range(n):
    os.close(os.open(f"{root}/d{i % 1000:03}/f{i:07}", os.O_CREAT | os.O_WRONLY, 0o644))
PY
created=$(date +%s.%N)
echo "created $n files in $(python3 -c "print(round($created - $start, 1))") s; daemon RSS $(rss)"
t pool export scale
kill $daemon; wait $daemon 2>/dev/null || true
"$tarn" daemon --state-dir "$work/state2" --socket "$work/s" > "$work/daemon2.log" 2>&1 &
daemon=$!
for _ in $(seq 50); do [ -S "$work/s" ] && break; sleep 0.1; done
t0=$(date +%s.%N)
t pool import -d "$work" scale
t1=$(date +%s.%N)
stat "$work/mnt/d999/f0999999" >/dev/null 2>&1 || stat "$work/mnt/d000/f0000000" >/dev/null
t2=$(date +%s.%N)
ls "$work/mnt/d500" | wc -l
echo "import of a pool with $n files: $(python3 -c "print(round($t1 - $t0, 2))") s (first stat $(python3 -c "print(round($t2 - $t1, 3))") s); daemon RSS after import $(rss)"
t debug check scale | tail -1
t pool export scale
