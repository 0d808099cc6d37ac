# adcache — see README.md.
SWIFT ?= swift
CACHE ?= .demo-cache
BIN = .build/debug/adcache

.PHONY: all deps build demo test lint clean bench release

all: build

deps:
	@scripts/deps.sh

build: deps
	$(SWIFT) build

# The main job on the bundled example feed: no network needed.
demo: build
	rm -rf $(CACHE)
	$(BIN) --cache-dir $(CACHE) fetch --no-progress Examples/feed.json
	$(BIN) --cache-dir $(CACHE) list
	$(BIN) --cache-dir $(CACHE) next --json

# The tests (mandoc lints the man page; nginx serves the big-file test).
test:
	@scripts/deps.sh mandoc openssl
	$(SWIFT) build
	$(SWIFT) test

# An optimised, stripped binary with the Swift runtime linked in: it runs on a device that
# has no Swift installed (libcurl4 and libssl3 are still needed).
release: deps
	$(SWIFT) build -c release --static-swift-stdlib
	strip -o .build/adcache .build/release/adcache
	@ls -l .build/adcache

lint:
	@scripts/deps.sh mandoc openssl
	mandoc -T lint -W warning man/adcache.1

clean:
	rm -rf .build $(CACHE)

# Speed and memory, side by side with curl, jq and a minimal Swift program (SPEC §7).
bench:
	bench/run.sh
