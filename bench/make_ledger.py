#!/usr/bin/env python3
"""Writes a ledger of N lines (SPEC §14) as adcache writes them: seq from 1, `at` in the
last N seconds (none old enough to be cut), `prev` the SHA-256 of the line before.

usage: make_ledger.py FILE N
"""
import hashlib, sys, time, datetime

path, n = sys.argv[1], int(sys.argv[2])
start = time.time() - n
prev = "0" * 64
with open(path, "w") as out:
    for i in range(1, n + 1):
        t = datetime.datetime.fromtimestamp(start + i, datetime.timezone.utc)
        at = t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
        event = "show" if i % 2 else "impression"
        nonce = f"{i // 2:032x}" + (".show" if event == "show" else "")
        line = f'{{"seq":{i},"at":"{at}","id":"ad-{i % 100}","event":"{event}","nonce":"{nonce}","prev":"{prev}"}}'
        prev = hashlib.sha256(line.encode()).hexdigest()
        out.write(line + "\n")
