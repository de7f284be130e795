# whilly — make help lists the targets.
GO        ?= go
BIN       := bin
GOLANGCI  := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

.PHONY: help build test test-short lint bench demo clean docs

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/whilly and bin/whilly-worker
	$(GO) build -o $(BIN)/ ./cmd/whilly ./cmd/whilly-worker

test: ## run every test against a private Postgres cluster, with the race detector
	$(GO) test -race -count=1 ./...

test-short: ## the tests without the race detector (faster)
	$(GO) test -count=1 ./...

lint: ## gofmt, go vet and golangci-lint
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed on:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run $(GOLANGCI) run ./...

docs: ## regenerate the configuration table in README.md and docs/configuration.md
	$(GO) generate ./internal/config

bench: ## Go benchmarks
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

demo: build ## run the demo plan end to end on the embedded database (sim agent, 2 workers)
	@./$(BIN)/whilly plan reset demo --hard --yes >/dev/null 2>&1 || true
	./$(BIN)/whilly plan apply --strict examples/demo/tasks.json
	./$(BIN)/whilly plan show demo
	./$(BIN)/whilly run --plan demo --workers 2 --agent sim
	./$(BIN)/whilly plan show demo

clean: ## remove build output
	rm -rf $(BIN)
