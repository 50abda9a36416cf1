# The two set-up commands of the README.
.PHONY: run test

# Dev mode: embedded etcd in ./concord-data, API on http://127.0.0.1:8080.
run:
	go run ./cmd/concord

# Every test: real embedded etcd, real HTTP, the real binary, kubectl, client-go.
test:
	@command -v kubectl >/dev/null || { echo "make test: kubectl is needed (the e2e tests drive the real kubectl)"; exit 1; }
	go vet ./...
	go test -count=1 -timeout 15m ./...
