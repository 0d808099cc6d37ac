#!/usr/bin/env python3
"""Writes an adcache cache directory with N ready ads (index.json + small asset files), and
the feed those ads came from (DIR/feed.json), for jq to select from as adcache does.

usage: make_index.py DIR N [--tracking]
"""
import hashlib, json, os, sys

d, n = sys.argv[1], int(sys.argv[2])
tracking = "--tracking" in sys.argv[3:]
os.makedirs(d + "/assets", exist_ok=True)
os.makedirs(d + "/partial", exist_ok=True)
ads, feed = [], []
for i in range(n):
    url = "https://cdn.example.com/splash/%05d.jpg" % i
    name = hashlib.sha256(url.encode()).hexdigest() + ".jpg"
    path = d + "/assets/" + name
    with open(path, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0" + bytes(60))
    ad = {
        "id": "ad-%05d" % i, "url": url, "type": "image", "placement": "splash" if i % 10 else "banner",
        "state": "ready", "file": name, "bytes": 64, "fileSha256": hashlib.sha256(b"x").hexdigest(),
        "etag": "\"%d\"" % i, "lastModified": "Mon, 02 Nov 2026 10:00:00 GMT",
        "start": 1700000000, "expires": 1900000000 + i, "maxShows": 1000, "duration": 5,
        "priority": i % 7, "shows": i % 5, "lastShowSeq": (i * 7919) % n, "lastShown": 1790000000 + i,
        "clickUrl": "https://example.com/c/%d" % i, "meta": {"title": "Ad %d" % i, "logo": "bottom"},
    }
    if tracking:
        ad["tracking"] = {
            "impression": ["https://t.example.com/imp?ad=[ADID]&t=[TIMESTAMP]&cb=[CACHEBUSTING]&dev=[DEVICEID]",
                           "https://t2.example.com/i/[CACHEBUSTING]/[ADID]"],
        }
    ads.append(ad)
    feed.append({k: ad[k] for k in ("id", "url", "type", "placement", "start", "expires", "maxShows", "duration",
                                    "priority", "clickUrl", "meta")})
index = {"version": 1, "showSeq": n, "ads": ads,
         "feed": {"url": "https://ads.example.com/splash.json", "etag": "\"f\""}}
with open(d + "/index.json", "w") as f:
    # As adcache writes it: pretty, each record compact on a line of its own.
    ads = index.pop("ads")
    f.write('{\n  "ads": [\n' + ",\n".join("    " + json.dumps(a, sort_keys=True, separators=(",", ":")) for a in ads)
            + "\n  ]" + "".join(",\n  %s: %s" % (json.dumps(k), json.dumps(v, sort_keys=True, indent=2).replace("\n", "\n  "))
                    for k, v in sorted(index.items()))
            + "\n}\n")
with open(d + "/feed.json", "w") as f:
    json.dump({"version": 1, "ads": feed}, f, indent=2)
