#!/usr/bin/env python3
"""Keeps a fuzz corpus small: the N inputs that cover the most coverage edges (docs/FUZZING.md).

Usage (from crates/copal-core/fuzz, after a run whose new inputs are in RUN_DIR):

    T=value   # or record
    cargo +nightly fuzz build
    mkdir -p /tmp/merged /tmp/scratch && rm -rf /tmp/merged/* /tmp/scratch/*
    target/x86_64-unknown-linux-gnu/release/$T -merge=1 -use_counters=0 /tmp/merged corpus/$T RUN_DIR
    target/x86_64-unknown-linux-gnu/release/$T -merge=1 -use_counters=0 \\
        -merge_control_file=/tmp/control /tmp/scratch /tmp/merged
    python3 trim_corpus.py /tmp/control corpus/$T 200

The first merge keeps the inputs that add edge coverage (what `cargo fuzz cmin` does); the second
one only writes the control file, which lists the edges each input covers. This script then picks
inputs greedily, each time the one adding the most uncovered edges (the smaller on ties), and
replaces the corpus directory with the first N.
"""

from __future__ import annotations

import os
import shutil
import sys


def main() -> int:
    control, corpus, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lines = open(control).read().splitlines()
    count = int(lines[0])
    files = lines[2:2 + count]
    edges: dict[int, set[int]] = {}
    for line in lines[2 + count:]:
        parts = line.split()
        if parts and parts[0] == "COV":
            edges[int(parts[1])] = set(map(int, parts[2:]))
    sizes = {i: os.path.getsize(files[i]) for i in edges}
    everything = set().union(*edges.values()) if edges else set()
    chosen: list[int] = []
    covered: set[int] = set()
    while len(chosen) < limit and covered != everything:
        best = max(edges, key=lambda i: (len(edges[i] - covered), -sizes[i]))
        if not edges[best] - covered:
            break
        chosen.append(best)
        covered |= edges[best]
    shutil.rmtree(corpus, ignore_errors=True)
    os.makedirs(corpus)
    for i in chosen:
        shutil.copy(files[i], corpus)
    print(f"kept {len(chosen)} inputs ({sum(sizes[i] for i in chosen)} bytes) covering "
          f"{len(covered)} of {len(everything)} edges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
