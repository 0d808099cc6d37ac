#!/usr/bin/env python3
"""Bytes a command writes: handed to write(2) for files (strace, standard output and error
left out), and sent to storage (the kernel's write accounting, ru_oublock × 512).

usage: io_bytes.py COMMAND ARGS... → prints "<written> <storage>"
"""
import os, re, subprocess, sys, tempfile

log = tempfile.mktemp()
subprocess.run(["strace", "-f", "-qq", "-e", "trace=write,pwrite64,writev", "-o", log] + sys.argv[1:],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
written = 0
for line in open(log):
    m = re.match(r"(?:\d+\s+)?(write|pwrite64|writev)\((\d+),.*= (\d+)$", line.strip())
    if m and int(m.group(2)) > 2:
        written += int(m.group(3))
os.unlink(log)
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, _, usage = os.wait4(p.pid, 0)
print(written, usage.ru_oublock * 512)
