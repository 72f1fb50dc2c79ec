#!/usr/bin/env bash
# SMB benchmarks: smbclient get/put of one large file against Samba's smbd
# sharing ext4, the same smbd sharing tarn's FUSE mount, and the smbd that
# tarn's daemon manages (sharesmb=on), same machine, same run (issue 10).
#
#   bench/smb.sh [--systems ext4,tarn-fuse,tarn] [--size 2G] [--repeat 3]
#                [--workdir DIR] [--out docs/benchmarks.md]
#
# Systems (data under --workdir, default /var/tmp/tarn-smb-bench, ext4):
#   ext4       smbd (Debian's samba, private config, port 44445) sharing an
#              ext4 directory
#   tarn-fuse  the same smbd sharing tarn's FUSE mount (raidz1 of 4 sparse
#              file vdevs, release build, as bench/run.sh)
#   tarn       the smbd tarn's daemon starts itself (`[smb] enable = true`,
#              `listen = "127.0.0.1:44446"`, `tarn smb user add root`,
#              `sharesmb=on`: share tbsmb)
# Rows: `smbclient -c 'put FILE'` of a --size file of random bytes (the
# local copy in the page cache), then `get` of it to /dev/null; the
# fastest of --repeat runs counts; the file put is compared with the
# original by checksum once. SMB2+ (smbclient's default, SMB3_11).
#
# Runs in a private network and mount namespace (unshare), as
# bench/nfs.sh. Appends a markdown table to --out. Needs root; installs
# samba and smbclient when missing. Not a test: never fails on a number.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

systems="ext4,tarn-fuse,tarn"
size="2G"
repeat="3"
workdir="/var/tmp/tarn-smb-bench"
out="docs/benchmarks.md"
args=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --systems) systems="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --workdir) workdir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "bench/smb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command_line="bench/smb.sh --systems $systems --size $size --repeat $repeat"
has() { case ",$systems," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[ "$(id -u)" = 0 ] || { echo "bench/smb.sh: needs root (namespaces, FUSE)" >&2; exit 1; }

if [ "${TARN_BENCH_NS:-}" != 1 ]; then
    need=()
    command -v smbd >/dev/null || need+=(samba)
    command -v smbclient >/dev/null || need+=(smbclient)
    if [ ${#need[@]} -gt 0 ]; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" </dev/null
    fi
    if has tarn-fuse || has tarn; then cargo build -j2 --release -p tarn; fi
    TARN_BENCH_NS=1 exec unshare --net --mount --fork --propagation private "$0" "${args[@]}"
fi

ip link set lo up
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
tarn_bin="$repo/target/release/tarn"
results="$workdir/results.tsv"
: > "$results"
vdev_size=$(( 4 * 1024 * 1024 * 1024 ))
password="tarn-bench"

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    mountpoint -q "$workdir/mnt-tarn" && umount -l "$workdir/mnt-tarn" 2>/dev/null || true
    rm -rf "$workdir/smbd" "$workdir/ext4" "$workdir/tarn" "$workdir/tarn-state" "$workdir/get.out"
}
trap cleanup EXIT
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; local keep=() p; for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; pids=("${keep[@]}"); }
wait_port() { for _ in $(seq 100); do ss -ltn "sport = :$1" | grep -q LISTEN && return 0; sleep 0.1; done; return 1; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$results"; echo "  $1 / $2: $3 $4"; }

# The file to put: random bytes, made once per workdir.
src="$workdir/source.data"
bytes=$(python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$size")
if [ "$(stat -c %s "$src" 2>/dev/null || echo 0)" != "$bytes" ]; then
    head -c "$bytes" /dev/urandom > "$src"
fi
src_sum=$(cksum < "$src")

# start_smbd SHARE-PATH: our own smbd, private config, on port 44445.
start_smbd() {
    local d="$workdir/smbd"
    rm -rf "$d"; mkdir -p "$d"/{lock,state,cache,private,pid,ncalrpc,log}
    cat > "$d/smb.conf" <<EOF
[global]
    server role = standalone server
    smb ports = 44445
    interfaces = 127.0.0.1
    bind interfaces only = yes
    disable netbios = yes
    server min protocol = SMB2
    lock directory = $d/lock
    state directory = $d/state
    cache directory = $d/cache
    private dir = $d/private
    pid directory = $d/pid
    ncalrpc dir = $d/ncalrpc
    passdb backend = tdbsam:$d/private/passdb.tdb
    log file = $d/log/%m.log
    load printers = no
    printing = bsd
    printcap name = /dev/null
    disable spoolss = yes
[bench]
    path = $1
    read only = no
EOF
    printf '%s\n%s\n' "$password" "$password" | smbpasswd -c "$d/smb.conf" -s -a root >/dev/null
    # its own session: smbd signals its whole process group when it stops
    setsid smbd --foreground --no-process-group -s "$d/smb.conf" > "$d/log/smbd.out" 2>&1 & smbd_pid=$!; pids+=("$smbd_pid")
    wait_port 44445 || { echo "bench/smb.sh: smbd did not start" >&2; cat "$d/log/smbd.out" >&2; exit 1; }
}

# timed_smb SYSTEM PORT SHARE: put and get rows.
run_rows() {
    local system=$1 port=$2 share=$3 best_put="" best_get="" t0 t1 s
    local smb=(smbclient "//127.0.0.1/$share" -p "$port" -U "root%$password")
    cat "$src" > /dev/null
    for rep in $(seq "$repeat"); do
        t0=$(date +%s.%N); "${smb[@]}" -c "put $src bench.data" >/dev/null; t1=$(date +%s.%N)
        s=$(python3 -c "print(f'{$t1 - $t0:.3f}')"); best_put=$(printf '%s\n' $best_put "$s" | sort -n | head -1)
        if [ "$rep" = 1 ]; then
            "${smb[@]}" -c "get bench.data $workdir/get.out" >/dev/null
            [ "$(cksum < "$workdir/get.out")" = "$src_sum" ] || { echo "bench/smb.sh: $system: the file read back differs" >&2; exit 1; }
            rm -f "$workdir/get.out"
        fi
        t0=$(date +%s.%N); "${smb[@]}" -c "get bench.data /dev/null" >/dev/null; t1=$(date +%s.%N)
        s=$(python3 -c "print(f'{$t1 - $t0:.3f}')"); best_get=$(printf '%s\n' $best_get "$s" | sort -n | head -1)
    done
    "${smb[@]}" -c "del bench.data" >/dev/null
    record "$system" "smbclient put $size" "$(python3 -c "print(f'{$bytes / $best_put / 2**20:.1f}')")" MiB/s
    record "$system" "smbclient get $size" "$(python3 -c "print(f'{$bytes / $best_get / 2**20:.1f}')")" MiB/s
}

if has ext4; then
    echo "== ext4"
    rm -rf "$workdir/ext4"; mkdir -p "$workdir/ext4"
    start_smbd "$workdir/ext4"
    run_rows ext4 44445 bench
    stop_pid "$smbd_pid"
    rm -rf "$workdir/ext4"
fi

tarn() { "$tarn_bin" --socket "$workdir/tarn.sock" "$@"; }
if has tarn-fuse || has tarn; then
    rm -rf "$workdir/tarn" "$workdir/tarn-state"; mkdir -p "$workdir/tarn" "$workdir/tarn-state"
    for i in 1 2 3 4; do truncate -s "$vdev_size" "$workdir/tarn/d$i"; done
    config=()
    if has tarn; then
        # the daemon's own smbd (state under the tarn state dir) on 44446
        printf '[smb]\nenable = true\nlisten = "127.0.0.1:44446"\n' > "$workdir/tarn-smb.toml"
        config=(--config "$workdir/tarn-smb.toml")
    fi
    "$tarn_bin" daemon --state-dir "$workdir/tarn-state" --socket "$workdir/tarn.sock" "${config[@]}" >"$workdir/tarn-daemon.log" 2>&1 & tpid=$!; pids+=("$tpid")
    for _ in $(seq 100); do [ -S "$workdir/tarn.sock" ] && break; sleep 0.1; done
    tarn pool create -m "$workdir/mnt-tarn" tbsmb raidz1 "$workdir"/tarn/d{1,2,3,4}
    for _ in $(seq 100); do mountpoint -q "$workdir/mnt-tarn" && break; sleep 0.1; done
    if has tarn-fuse; then
        echo "== tarn-fuse"
        start_smbd "$workdir/mnt-tarn"
        run_rows tarn-fuse 44445 bench
        stop_pid "$smbd_pid"
    fi
    if has tarn; then
        echo "== tarn"
        printf '%s\n' "$password" | tarn smb user add --password-stdin root
        tarn set sharesmb=on tbsmb          # share name tbsmb (the dataset, / as _)
        wait_port 44446 || { echo "bench/smb.sh: tarn's smbd does not listen on 127.0.0.1:44446" >&2; cat "$workdir/tarn-daemon.log" >&2; exit 1; }
        for _ in $(seq 50); do smbclient //127.0.0.1/tbsmb -p 44446 -U "root%$password" -c ls >/dev/null 2>&1 && break; sleep 0.2; done
        tarn share -l
        run_rows tarn 44446 tbsmb
    fi
    tarn pool destroy -f tbsmb 2>/dev/null || tarn pool export tbsmb 2>/dev/null || true
    stop_pid "$tpid"
fi

machine="$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r), disk $(df -T "$workdir" | awk 'NR==2 {print $1 " (" $2 ")"}')"
report=$(python3 - "$results" <<'PY'
import sys, collections
rows = collections.OrderedDict()
systems = []
for line in open(sys.argv[1]):
    system, row, value, unit = line.rstrip("\n").split("\t")
    rows.setdefault(row, {})[system] = (float(value), unit)
    if system not in systems:
        systems.append(system)
ratios = [(a, b) for a, b in [("tarn", "ext4"), ("tarn", "tarn-fuse"), ("tarn-fuse", "ext4")] if a in systems and b in systems]
head = ["row"] + [f"smbd over {s}" if s != "tarn" else "tarn's smbd" for s in systems] + [f"{a} / {b}" for a, b in ratios]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for row, values in rows.items():
    cells = [row] + [f"{values[s][0]:,.0f} {values[s][1]}" if s in values else "-" for s in systems]
    for a, b in ratios:
        x, y = values.get(a), values.get(b)
        cells.append(f"{x[0] / y[0]:.2f}x" if x and y and y[0] > 0 else "-")
    print("| " + " | ".join(cells) + " |")
PY
)
{
    echo
    echo "### SMB run of $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$command_line\`  "
    echo "Machine: $machine; load average at the end $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared with other builds)  "
    echo "Client: smbclient $(smbclient --version | awk '{print $2}') over TCP loopback, default protocol (SMB3_11); fastest of $repeat runs."
    echo
    echo "$report"
} >> "$out"
echo
echo "$report"
echo "appended to $out"
