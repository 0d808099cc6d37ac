-- adcache's proof of play from mpv (adcache(1), PROOF OF PLAY): contrib/adcache-launcher
-- loads it with --script, so that what is reported is what really played.
--
-- A video reports `start` once playback has begun (unless `adcache next` already queued it
-- with the show: a VAST video's), `firstQuartile`, `midpoint` and `thirdQuartile` when the
-- player's position (mpv's time-pos, against the file's real duration) passes them, and
-- `complete` at its end; an image reports `complete` when its countdown ran out. The skip
-- key (`s`, or ESC) ends the ad with `skip` — a VAST video only after its skipOffset.
-- Each event is reported once, by `adcache event EVENT ID` (ADCACHE_AD_ID), never from
-- mpv's own thread: a subprocess, as mpv runs it.
--
-- Render mode (adcache(1), "An impression is a render"): the show `adcache next --render`
-- recorded (ADCACHE_SHOW, its token) is confirmed when its first frame is on screen — mpv's
-- `playback-restart`, which comes once the first frame of a video, or the image, is shown —
-- with `adcache event impression ID --show TOKEN`. A player that fails before that confirms
-- nothing.
local id = os.getenv("ADCACHE_AD_ID") or ""
local kind = os.getenv("ADCACHE_AD_TYPE") or ""
local start_queued = os.getenv("ADCACHE_START_QUEUED") == "1"
local skip_offset = tonumber(os.getenv("ADCACHE_SKIP_OFFSET") or "")
local adcache = os.getenv("ADCACHE") or "adcache"
local show = os.getenv("ADCACHE_SHOW") or ""
local sent = {}
-- A VAST video's `progress` offsets (ADCACHE_PROGRESS, seconds, comma-separated): when the
-- position passes one or more, `adcache event progress ID --offset POS` queues them.
local offsets = {}
for o in string.gmatch(os.getenv("ADCACHE_PROGRESS") or "", "[^,]+") do
    local n = tonumber(o)
    if n then offsets[#offsets + 1] = n end
end
table.sort(offsets)
local next_offset = 1

local function progress(pos)
    if id == "" or next_offset > #offsets or pos < offsets[next_offset] then return end
    while next_offset <= #offsets and offsets[next_offset] <= pos do next_offset = next_offset + 1 end
    mp.command_native({
        name = "subprocess", args = { adcache, "event", "progress", id, "--offset", string.format("%.3f", pos) },
        playback_only = false, capture_stdout = true, capture_stderr = false,
    })
end

local function report(event)
    if id == "" or sent[event] then return end
    sent[event] = true
    mp.command_native({
        name = "subprocess", args = { adcache, "event", event, id }, playback_only = false,
        capture_stdout = true, capture_stderr = false,
    })
end

local function confirm()
    if id == "" or show == "" or sent.impression then return end
    sent.impression = true
    mp.command_native({
        name = "subprocess", args = { adcache, "event", "impression", id, "--show", show }, playback_only = false,
        capture_stdout = true, capture_stderr = false,
    })
end
mp.register_event("playback-restart", confirm)

mp.observe_property("time-pos", "number", function(_, pos)
    if kind ~= "video" or pos == nil or sent.skip then return end
    if pos > 0 and not start_queued then report("start") end
    progress(pos)
    local d = mp.get_property_number("duration")
    if not d or d <= 0 then return end
    if pos >= d / 4 then report("firstQuartile") end
    if pos >= d / 2 then report("midpoint") end
    if pos >= d * 3 / 4 then report("thirdQuartile") end
end)

local function skip()
    local pos = mp.get_property_number("time-pos") or 0
    if kind == "video" and skip_offset and pos < skip_offset then
        mp.osd_message(string.format("skip in %d s", math.ceil(skip_offset - pos)))
        return
    end
    report("skip")
    mp.command("quit")
end
mp.add_forced_key_binding("s", "adcache-skip", skip)
mp.add_forced_key_binding("ESC", "adcache-skip-esc", skip)

mp.register_event("end-file", function(e)
    if e.reason == "eof" and not sent.skip then
        if kind == "video" then
            -- The last frames may come after the last position update.
            -- Played to its end: every offset has been passed.
            if #offsets > 0 then progress(offsets[#offsets]) end
            report("firstQuartile")
            report("midpoint")
            report("thirdQuartile")
        end
        report("complete")
    end
end)
