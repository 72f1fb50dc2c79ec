# The systems every benchmark compares, set up the same way for each script
# (sourced by bench/run.sh and bench/walk.sh; not run on its own).
#
#   raw       a plain directory on the disk that holds $workdir (ext4): the reference
#   zfs-fuse  Debian's zfs-fuse, raidz1 of 4 sparse files, compression off
#   btrfs     btrfs on 4 loop devices over sparse files, -d raid5 -m raid1
#   tarn      target/release/tarn, raidz1 of 4 sparse file vdevs, FUSE mount
#
# The caller sets $repo, $workdir (absolute), $systems (comma list) and
# $vdev_size, then calls, per system S:
#   system_start S      sets $mnt to an empty directory on S
#   system_cold S       drops every cache: export/import (tarn, zfs-fuse) or
#                       unmount/mount (btrfs), then drop_caches
#   system_stop S       destroys what system_start made
# system_stop_all runs on EXIT (installed by system_start), so an
# interrupted run leaves no mount, loop device or daemon behind.

has() { case ",$systems," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
wait_mount() { for _ in $(seq 100); do mountpoint -q "$1" && return 0; sleep 0.1; done; echo "no mount at $1" >&2; return 1; }

# install_missing [EXTRA PACKAGE...]: apt-get what the chosen systems need.
install_missing() {
    local need=("$@")
    command -v python3 >/dev/null || need+=(python3)
    if has zfs-fuse && ! command -v zfs-fuse >/dev/null; then need+=(zfs-fuse); fi
    if has btrfs && ! command -v mkfs.btrfs >/dev/null; then need+=(btrfs-progs); fi
    if [ ${#need[@]} -gt 0 ]; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" </dev/null
    fi
}

# ---- raw ext4 (reference)
raw_start() { rm -rf "$workdir/raw"; mkdir -p "$workdir/raw"; mnt="$workdir/raw"; }
raw_cold() { drop_caches; }
raw_stop() { rm -rf "$workdir/raw"; }

# ---- zfs-fuse
zfs_pid=""
zfs_start() {
    rm -rf "$workdir/zfs"; mkdir -p "$workdir/zfs"
    for i in 1 2 3 4; do truncate -s "$vdev_size" "$workdir/zfs/d$i"; done
    if ! zpool list >/dev/null 2>&1; then   # no zfs-fuse daemon answering yet
        zfs-fuse --no-daemon >"$workdir/zfs-fuse.log" 2>&1 &
        zfs_pid=$!
        sleep 2
    fi
    zpool create -f -m "$workdir/mnt-zfs" tbzfs raidz1 "$workdir"/zfs/d{1,2,3,4}
    zfs set compression=off tbzfs
    mnt="$workdir/mnt-zfs"
}
zfs_cold() { zpool export tbzfs; drop_caches; zpool import -d "$workdir/zfs" tbzfs; }
zfs_stop() {
    # zfs-fuse may report "busy" for a moment after the last unlink.
    for _ in 1 2 3 4 5 6 7 8 9 10; do zpool destroy tbzfs 2>/dev/null && break; sleep 1; done
    zpool export tbzfs 2>/dev/null || true
    if [ -n "$zfs_pid" ]; then kill "$zfs_pid" 2>/dev/null || true; wait "$zfs_pid" 2>/dev/null || true; zfs_pid=""; fi
    rm -rf "$workdir/zfs"
}

# ---- btrfs on loop devices
loops=()
btrfs_start() {
    rm -rf "$workdir/btrfs"; mkdir -p "$workdir/btrfs" "$workdir/mnt-btrfs"
    for i in 1 2 3 4; do
        truncate -s "$vdev_size" "$workdir/btrfs/d$i"
        loops+=("$(losetup --find --show "$workdir/btrfs/d$i")")
    done
    mkfs.btrfs -q -f -d raid5 -m raid1 "${loops[@]}"
    btrfs device scan >/dev/null 2>&1 || true
    mount -t btrfs "${loops[0]}" "$workdir/mnt-btrfs"
    mnt="$workdir/mnt-btrfs"
}
btrfs_cold() { umount "$workdir/mnt-btrfs"; drop_caches; mount -t btrfs "${loops[0]}" "$workdir/mnt-btrfs"; }
btrfs_stop() {
    umount "$workdir/mnt-btrfs" 2>/dev/null || true
    for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    loops=()
    rm -rf "$workdir/btrfs"
}

# ---- tarn
tarn_pid=""
# TARN_BIN: another build to measure (an A/B of two commits).
tarn_bin="${TARN_BIN:-$repo/target/release/tarn}"
tarn() { "$tarn_bin" --socket "$workdir/tarn.sock" "$@"; }
tarn_start() {
    [ -x "$tarn_bin" ] || (cd "$repo" && cargo build -j2 --release -p tarn)
    # A socket left by an earlier run's daemon would pass the wait below
    # before the new daemon replaced it.
    rm -rf "$workdir/tarn" "$workdir/tarn-state" "$workdir/tarn.sock"; mkdir -p "$workdir/tarn" "$workdir/tarn-state"
    for i in 1 2 3 4; do truncate -s "$vdev_size" "$workdir/tarn/d$i"; done
    # shellcheck disable=SC2086 # TARN_DAEMON_ARGS: extra words, e.g. --config FILE
    "$tarn_bin" daemon --state-dir "$workdir/tarn-state" --socket "$workdir/tarn.sock" ${TARN_DAEMON_ARGS:-} >"$workdir/tarn-daemon.log" 2>&1 &
    tarn_pid=$!
    # The socket file exists from bind(), before listen(): wait for an answer.
    for _ in $(seq 100); do [ -S "$workdir/tarn.sock" ] && tarn pool list >/dev/null 2>&1 && break; sleep 0.1; done
    # With $tarn_slog (a file or device), the pool gets it as a log vdev;
    # with $tarn_cache, as a cache device (L2ARC).
    tarn pool create -m "$workdir/mnt-tarn" tbtarn raidz1 "$workdir"/tarn/d{1,2,3,4} ${tarn_slog:+log "$tarn_slog"} ${tarn_cache:+cache "$tarn_cache"}
    wait_mount "$workdir/mnt-tarn"
    mnt="$workdir/mnt-tarn"
}
tarn_cold() { tarn pool export tbtarn; drop_caches; tarn pool import -d "$workdir/tarn" tbtarn; wait_mount "$workdir/mnt-tarn"; }
tarn_stop() {
    tarn pool destroy -f tbtarn 2>/dev/null || tarn pool export tbtarn 2>/dev/null || true
    if [ -n "$tarn_pid" ]; then kill "$tarn_pid" 2>/dev/null || true; wait "$tarn_pid" 2>/dev/null || true; tarn_pid=""; fi
    umount -l "$workdir/mnt-tarn" 2>/dev/null || true
    rm -rf "$workdir/tarn" "$workdir/tarn-state"
}

# ---- dispatch by system name
system_fn() { case "$1" in zfs-fuse) echo zfs ;; *) echo "$1" ;; esac; }
started=()
system_stop_all() { for s in "${started[@]}"; do "$(system_fn "$s")_stop" || true; done; started=(); }
system_start() { trap system_stop_all EXIT; started+=("$1"); "$(system_fn "$1")_start"; }
system_cold() { "$(system_fn "$1")_cold"; }
system_stop() {
    "$(system_fn "$1")_stop"
    local keep=() s
    for s in "${started[@]}"; do [ "$s" = "$1" ] || keep+=("$s"); done
    started=("${keep[@]}")
}

# machine_line: one line describing the machine and the disk under $workdir.
machine_line() {
    local disk
    disk=$(df -T "$workdir" | awk 'NR==2 {print $1 " (" $2 ")"}')
    echo "$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, kernel $(uname -r), disk $disk"
}
