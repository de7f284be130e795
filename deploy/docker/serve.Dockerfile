# syntax=docker/dockerfile:1
# The control plane image: whilly (serve, migrate, admin commands) on Debian slim.
# Build from the repository root:
#   docker build -f deploy/docker/serve.Dockerfile -t whilly-serve:dev .
ARG GO_IMAGE=golang:1.26.8-trixie
ARG BASE_IMAGE=debian:13.2-slim

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

FROM ${BASE_IMAGE}
# curl for the HEALTHCHECK; ca-certificates for GitHub and a TLS database.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/whilly --create-home --shell /usr/sbin/nologin whilly
COPY --from=build /out/whilly /usr/local/bin/whilly
USER 10001:10001
WORKDIR /var/lib/whilly
ENV WHILLY_LISTEN=0.0.0.0:8000 \
    WHILLY_DATA_DIR=/var/lib/whilly
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8000/healthz"]
ENTRYPOINT ["whilly"]
CMD ["serve"]
