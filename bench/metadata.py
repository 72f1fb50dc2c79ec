#!/usr/bin/env python3
"""Metadata row: create, stat and unlink N small files (1 KiB each).

fio cannot time a create/stat/unlink cycle of many files, so this does it
in one process with plain system calls, spread over 100 directories.
Prints one JSON object: ops/s for each phase and for the whole cycle.

    bench/metadata.py DIR [COUNT]
"""
import json
import os
import sys
import time


def main():
    root = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
    dirs = 100
    base = os.path.join(root, "metadata-bench")
    os.makedirs(base, exist_ok=True)
    for d in range(dirs):
        os.makedirs(os.path.join(base, f"d{d:03}"), exist_ok=True)
    paths = [os.path.join(base, f"d{i % dirs:03}", f"f{i:06}") for i in range(count)]
    payload = b"x" * 1024

    t0 = time.monotonic()
    for p in paths:
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, payload)
        os.close(fd)
    t1 = time.monotonic()
    for p in paths:
        st = os.stat(p)
        if st.st_size != len(payload):
            sys.exit(f"{p}: size {st.st_size}, expected {len(payload)}")
    t2 = time.monotonic()
    for p in paths:
        os.unlink(p)
    t3 = time.monotonic()
    for d in range(dirs):
        os.rmdir(os.path.join(base, f"d{d:03}"))
    os.rmdir(base)
    print(json.dumps({
        "files": count,
        "create_per_s": count / (t1 - t0),
        "stat_per_s": count / (t2 - t1),
        "unlink_per_s": count / (t3 - t2),
        "cycle_ops_per_s": 3 * count / (t3 - t0),
    }))


if __name__ == "__main__":
    main()
