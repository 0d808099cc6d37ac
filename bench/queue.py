#!/usr/bin/env python3
"""Queues N impressions in an adcache cache directory (its journal, as `next` appends them),
each with one tracker URL on 127.0.0.1:PORT; writes curl's config for the same URLs.

usage: queue.py DIR N PORT CURL_CONFIG
"""
import json, os, random, sys, time

d, n, port, cfg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
now = time.time()
with open(d + "/journal", "w") as j, open(cfg, "w") as c:
    for i in range(n):
        url = "http://127.0.0.1:%s/t/imp?cb=%08d&n=%d" % (port, random.randrange(10**8), i)
        at = now - n + i
        j.write(json.dumps({"at": at, "day": int(at // 86400), "event": "impression", "id": "a",
                            "nonce": os.urandom(16).hex(), "seq": i + 1, "trackers": [url]},
                           separators=(",", ":")) + "\n")
        c.write('url = "%s"\noutput = "/dev/null"\n' % url)
