# syntax=docker/dockerfile:1
# The control plane image: whilly (serve, migrate, admin commands) with what the planner
# and the failure analyzer (WHILLY_PLANNER, WHILLY_TRIZ_ENABLED=1) run their agent with:
# bubblewrap, git and the pinned Claude Code CLI (Node >= 22).
# Build from the repository root:
#   docker build -f deploy/docker/serve.Dockerfile -t whilly-serve:dev .
# Both bases are build arguments: `make images` builds from local Debian bases with buildah.
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
      -o /out/whilly ./cmd/whilly

# Claude Code needs Node >= 22 (its package.json engines).
FROM ${NODE_IMAGE}
ARG CLAUDE_CODE_VERSION=2.1.332
# curl for the HEALTHCHECK; ca-certificates for GitHub and a TLS database; bubblewrap,
# git and Claude Code for the planner and the analyzer, each run in its box.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates curl git \
 && rm -rf /var/lib/apt/lists/* \
 && npm install --global --no-fund --no-audit --omit=dev "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" \
 && npm cache clean --force \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/whilly --create-home --shell /usr/sbin/nologin whilly
COPY --from=build /out/whilly /usr/local/bin/whilly
USER 10001:10001
WORKDIR /var/lib/whilly
ENV WHILLY_LISTEN=0.0.0.0:8000 \
    WHILLY_DATA_DIR=/var/lib/whilly \
    CLAUDE_BIN=/usr/local/bin/claude
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8000/healthz"]
ENTRYPOINT ["whilly"]
CMD ["serve"]
