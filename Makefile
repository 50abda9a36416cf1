# The two set-up commands of the README.
.PHONY: run test deps fuzz

# Dev mode: embedded etcd in ./concord-data, API on https://127.0.0.1:8080.
run:
	go run ./cmd/concord

# Every test: real embedded etcd, real HTTP, the real binary, kubectl,
# client-go, a headless Chromium, and a 3-member etcd cluster behind HAProxy.
test: deps
	go vet ./...
	go test -count=1 -timeout 15m ./...

# Fuzz the request decoders and the entity-tag parser, FUZZTIME each, from
# their seeds and the corpora kept in apiserver/testdata/fuzz (which make
# test runs as regular tests). A failing input is written there: keep it
# with the fix. The budget is a count of inputs, not a duration: Go 1.26's
# fuzz coordinator can fail a run at the end of a -fuzztime duration with
# "context deadline exceeded" and no input (golang/go#75804, fixed in 1.27).
# Longer hunts: make fuzz FUZZTIME=1000000x.
FUZZTIME ?= 20000x
FUZZ_TARGETS = FuzzDecodeObject FuzzDecodeJSONMatchesSerializer FuzzDecodeDeleteOptions FuzzParseListOptions FuzzParseTagList
fuzz:
	@for target in $(FUZZ_TARGETS); do \
	  echo "go test ./apiserver -run '^$$' -fuzz '^$$target\$$' -fuzztime $(FUZZTIME)"; \
	  go test ./apiserver -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

# deps installs what the tests drive that Go does not bring: Chromium and
# HAProxy from Debian's packages (as root; otherwise it says what to run).
# kubectl is expected at /usr/bin/kubectl.
deps:
	@command -v kubectl >/dev/null || { echo "make test: kubectl is needed (the e2e tests drive the real kubectl)"; exit 1; }
	@if ! command -v chromium >/dev/null || ! command -v haproxy >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y chromium haproxy; \
	  else echo "make test: the tests need Chromium and HAProxy: sudo apt-get install -y chromium haproxy"; exit 1; fi; \
	fi
