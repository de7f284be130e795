# syntax=docker/dockerfile:1
# The worker image: whilly-worker with git, bubblewrap, the pinned agent CLIs (Claude Code
# and OpenAI Codex) and the toolchains an agent builds and tests projects with in its box:
# Go (from the build stage), Node and npm, Python 3 with pip and venv, make and a C
# compiler. Another toolchain: derive an image from this one and install it outside HOME
# (e.g. under /usr/local), or name its directory in WHILLY_SANDBOX_TOOLS (docs/sandbox.md).
# Build from the repository root:
#   docker build -f deploy/docker/worker.Dockerfile -t whilly-worker:dev .
# Both bases are build arguments: `make images` builds from local Debian bases with buildah.
# bubblewrap needs user namespaces and its own /proc inside the container: see
# docs/operations.md (security options of compose, Kubernetes and systemd).
ARG GO_IMAGE=golang:1.26.8-trixie
ARG NODE_IMAGE=node:24.21.0-trixie-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ARG DATE=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/whilly-go/whilly/internal/version.version=${VERSION} -X github.com/whilly-go/whilly/internal/version.commit=${COMMIT} -X github.com/whilly-go/whilly/internal/version.date=${DATE}" \
      -o /out/whilly-worker ./cmd/whilly-worker

# Claude Code needs Node >= 22 (its package.json engines).
FROM ${NODE_IMAGE}
ARG CLAUDE_CODE_VERSION=2.1.332
ARG CODEX_VERSION=0.171.0
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates curl git openssh-client \
      build-essential python3 python3-pip python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && npm install --global --no-fund --no-audit --omit=dev \
      "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" "@openai/codex@${CODEX_VERSION}" \
 && npm cache clean --force \
 && useradd --uid 10001 --user-group --home-dir /home/whilly --create-home --shell /bin/bash whilly \
 && mkdir -p /var/lib/whilly/workspaces /var/lib/whilly/cache && chown -R whilly:whilly /var/lib/whilly \
 && install -d -o whilly -g whilly /home/whilly/work
COPY --from=build /usr/local/go /usr/local/go
COPY --from=build /out/whilly-worker /usr/local/bin/whilly-worker
USER 10001:10001
# Not HOME: the agent of a plan without a repository works in the current directory, and
# the box refuses one that would expose HOME.
WORKDIR /home/whilly/work
ENV WHILLY_WORKSPACE_DIR=/var/lib/whilly/workspaces \
    WHILLY_CACHE_DIR=/var/lib/whilly/cache \
    PATH=/usr/local/go/bin:$PATH \
    CLAUDE_BIN=/usr/local/bin/claude \
    CODEX_BIN=/usr/local/bin/codex
# The worker serves no port: healthy means its control plane answers.
HEALTHCHECK --interval=60s --timeout=10s --start-period=30s --retries=3 \
  CMD ["sh", "-c", "curl -fsS -o /dev/null \"${WHILLY_CONTROL_URL:?}/healthz\""]
ENTRYPOINT ["whilly-worker"]
