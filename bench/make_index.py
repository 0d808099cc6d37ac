#!/usr/bin/env python3
"""Writes an adcache cache directory with N ready ads (index.json + small asset files).

usage: make_index.py DIR N
"""
import hashlib, json, os, sys

d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d + "/assets", exist_ok=True)
os.makedirs(d + "/partial", exist_ok=True)
ads = []
for i in range(n):
    url = "https://cdn.example.com/splash/%05d.jpg" % i
    name = hashlib.sha256(url.encode()).hexdigest() + ".jpg"
    path = d + "/assets/" + name
    with open(path, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0" + bytes(60))
    ads.append({
        "id": "ad-%05d" % i, "url": url, "type": "image", "placement": "splash" if i % 10 else "banner",
        "state": "ready", "file": name, "bytes": 64, "fileSha256": hashlib.sha256(b"x").hexdigest(),
        "etag": "\"%d\"" % i, "lastModified": "Mon, 02 Nov 2026 10:00:00 GMT",
        "start": 1700000000, "expires": 1900000000 + i, "maxShows": 1000, "duration": 5,
        "priority": i % 7, "shows": i % 5, "lastShowSeq": (i * 7919) % n, "lastShown": 1790000000 + i,
        "clickUrl": "https://example.com/c/%d" % i, "meta": {"title": "Ad %d" % i, "logo": "bottom"},
    })
index = {"version": 1, "showSeq": n, "ads": ads,
         "feed": {"url": "https://ads.example.com/splash.json", "etag": "\"f\""}}
with open(d + "/index.json", "w") as f:
    json.dump(index, f, indent=2, sort_keys=True)
