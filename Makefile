# whilly — make help lists the targets.
GO        ?= go
BIN       := bin
GOLANGCI  := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

# Build stamp (whilly version, whilly-worker --version). Override on the command line:
# make release VERSION=v0.2.0
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE      ?= $(shell date -u -d @$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || date +%s)} +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
VPKG      := github.com/whilly-go/whilly/internal/version
LDFLAGS   := -X $(VPKG).version=$(VERSION) -X $(VPKG).commit=$(COMMIT) -X $(VPKG).date=$(DATE)
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST      := dist

.PHONY: help build release print-ldflags test test-deploy test-short lint bench demo clean docs screenshot images

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/whilly and bin/whilly-worker
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/whilly ./cmd/whilly-worker

release: ## static binaries for linux and darwin (amd64, arm64) in dist/, with SHA256SUMS
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; name=whilly_$(VERSION)_$${os}_$${arch}; \
	  echo "release: $$name"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -buildvcs=false -ldflags '-s -w $(LDFLAGS)' \
	    -o $(DIST)/$$name/ ./cmd/whilly ./cmd/whilly-worker; \
	  cp LICENSE README.md CHANGELOG.md $(DIST)/$$name/; \
	  tar -C $(DIST) --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf $(DIST)/$$name.tar.gz $$name; \
	  rm -rf $(DIST)/$$name; \
	done
	cd $(DIST) && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

images: ## build the serve and worker images with buildah from local Debian bases and run their checks (root)
	deploy/images/build.sh

print-ldflags: # the -ldflags of build and release (used by internal/version's test)
	@echo '$(LDFLAGS)'

test: ## run every test against a private Postgres cluster, with the race detector; then deploy/'s
	$(GO) test -race -count=1 ./...
	$(MAKE) test-deploy

test-deploy: ## render the Helm chart, load the compose file, parse the Dockerfiles (module deploy/)
	cd deploy && $(GO) test -count=1 ./...

test-short: ## the tests without the race detector (faster)
	$(GO) test -count=1 ./...

lint: ## gofmt, go vet and golangci-lint
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed on:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	$(GO) run $(GOLANGCI) run ./...

docs: ## regenerate the configuration table in docs/configuration.md
	$(GO) generate ./internal/config

screenshot: ## docs/dashboard.png: the demo plan's dashboard page, taken by headless Chromium
	$(GO) test -count=1 -run '^TestScreenshot$$' ./web -screenshot $(CURDIR)/docs/dashboard.png

bench: ## Go benchmarks
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

demo: build ## run the demo plan end to end on the embedded database (sim agent, 2 workers)
	@./$(BIN)/whilly plan reset demo --hard --yes >/dev/null 2>&1 || true
	./$(BIN)/whilly plan apply --strict examples/demo/tasks.json
	./$(BIN)/whilly plan show demo
	./$(BIN)/whilly run --plan demo --workers 2 --agent sim
	./$(BIN)/whilly plan show demo

clean: ## remove build output
	rm -rf $(BIN) $(DIST)
