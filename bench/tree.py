#!/usr/bin/env python3
"""Build the tree the directory-walk rows read (bench/walk.sh).

    bench/tree.py DIR [FILES]

FILES (default 100,000) small files in a tree two directories deep:
10 top directories, each with 10 subdirectories, each holding FILES/100
files (`DIR/t3/s7/f0421`). File i holds (i * 7919) % 2048 + 1 bytes (1 KiB
on average), the same on every run. Prints one JSON object: files,
directories and bytes made.
"""
import json
import os
import sys


def main():
    root = sys.argv[1]
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    per_dir = max(1, files // 100)
    payload = b"tarn-walk " * 205
    made = dirs = size = 0
    for t in range(10):
        for s in range(10):
            d = os.path.join(root, f"t{t}", f"s{s}")
            os.makedirs(d, exist_ok=True)
            dirs += 1
            for j in range(per_dir):
                if made == files:
                    break
                n = (made * 7919) % 2048 + 1
                fd = os.open(os.path.join(d, f"f{j:04}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, payload[:n])
                os.close(fd)
                made += 1
                size += n
    print(json.dumps({"files": made, "directories": dirs + 10 + 1, "bytes": size}))


if __name__ == "__main__":
    main()
