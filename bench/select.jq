# The selection `adcache next --peek` makes (SPEC §4), in jq, for the benchmark: eligible
# ready splash ads at $now, highest priority, least recently shown, soonest expiry, id.
[.ads[]
 | select(.state == "ready" and .file != null and .placement == "splash")
 | select((.start // 0) <= $now and ((.expires // 1e300) > $now))
 | select(.maxShows == null or .shows < .maxShows)]
| sort_by([-.priority, (.lastShowSeq // 0), (.expires // 1e300), .id])
| first
| .file
