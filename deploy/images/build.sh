#!/usr/bin/env bash
# make images: builds the serve and worker images without a Docker daemon or a registry,
# then runs their programs in each image's root filesystem. As root, on Debian:
#   1. local bases from Debian's packages (mmdebstrap), in buildah's storage:
#      - localhost/whilly-base/golang:<go>-<suite>: Debian + this machine's Go toolchain
#        (the build stage of both Dockerfiles);
#      - localhost/whilly-base/node:<node>-<suite>-slim: Debian + Node and npm, the pinned
#        versions of the Dockerfiles' NODE_IMAGE, from the npm registry's node-linux-<arch>
#        and npm packages (Debian 13's nodejs is 20; Claude Code needs >= 22);
#   2. both images with `buildah bud --isolation chroot`, the bases given as build arguments;
#   3. checks in each image: whilly version, whilly serve answering /readyz on its embedded
#      database, whilly-worker --version, bwrap, git, claude and codex --version.
# Downloads and the Go caches are kept in WHILLY_IMAGES_CACHE (default
# /var/cache/whilly-images) and the bases in buildah's storage, so a second run reuses them.
# A chroot refuses new user namespaces: the sandbox's self-check runs in the host tests.
set -euo pipefail
cd "$(dirname "$0")/../.."

cache="${WHILLY_IMAGES_CACHE:-/var/cache/whilly-images}"
tag="${WHILLY_IMAGES_TAG:-dev}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
serve_image="localhost/whilly-serve:$tag"
worker_image="localhost/whilly-worker:$tag"

say() { echo "images: $*"; }
die() { echo "images: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (buildah --isolation chroot and mmdebstrap need it)"

# --- tools ---------------------------------------------------------------------------
need=()
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "${need[@]}"
fi
export BUILDAH_ISOLATION=chroot
mkdir -p "$cache"

# The Dockerfiles' defaults pin the versions: NODE_IMAGE=node:<version>-<suite>-slim.
arg_default() { sed -n "s/^ARG $1=//p" "$2" | head -n1; }
node_ref="$(arg_default NODE_IMAGE deploy/docker/worker.Dockerfile)"
[ "$node_ref" = "$(arg_default NODE_IMAGE deploy/docker/serve.Dockerfile)" ] ||
  die "serve.Dockerfile and worker.Dockerfile pin different NODE_IMAGE defaults"
node_tag="${node_ref#node:}"                  # 24.21.0-trixie-slim
node_version="${node_tag%%-*}"                # 24.21.0
suite="$(echo "$node_tag" | cut -d- -f2)"     # trixie
claude_version="$(arg_default CLAUDE_CODE_VERSION deploy/docker/worker.Dockerfile)"
codex_version="$(arg_default CODEX_VERSION deploy/docker/worker.Dockerfile)"
npm_version="${WHILLY_IMAGES_NPM_VERSION:-11.21.3}"
case "$(dpkg --print-architecture)" in
  amd64) node_arch=x64 ;;
  arm64) node_arch=arm64 ;;
  *) die "no Node build for $(dpkg --print-architecture)" ;;
esac

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

# debian_rootfs SUITE: the cached minbase tarball of SUITE (mmdebstrap, Debian's packages).
debian_rootfs() {
  local tar="$cache/debian-$1-minbase.tar"
  if [ ! -s "$tar" ]; then
    say "mmdebstrap $1 (once; cached in $tar)" >&2
    mmdebstrap --quiet --format=tar --variant=minbase --include=ca-certificates "$1" "$tar.tmp" "$mirror" >&2
    mv "$tar.tmp" "$tar"
  fi
  echo "$tar"
}

# Working containers of this run, removed at exit whatever happens.
ctrs=()
trap 'for c in "${ctrs[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done' EXIT

# new_base TAR: a working container holding the root filesystem of TAR, mounted.
new_base() {
  ctr="$(buildah from scratch)"
  ctrs+=("$ctr")
  mnt="$(buildah mount "$ctr")"
  tar -C "$mnt" -xf "$1"
  # A machine behind a TLS-inspecting proxy trusts it through CAs added locally; the
  # bases (never published) trust them too, so that the builds reach the Go module proxy
  # and the npm registry. npm reads the system bundle only when told (cafile).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$mnt/usr/local/share/ca-certificates/"
    chroot "$mnt" update-ca-certificates >/dev/null 2>&1
    mkdir -p "$mnt/usr/local/etc"
    echo "cafile=/etc/ssl/certs/ca-certificates.crt" >"$mnt/usr/local/etc/npmrc"
  fi
}

# --- bases -----------------------------------------------------------------------------
goroot="$(go env GOROOT)"
go_version="$(go env GOVERSION)"; go_version="${go_version#go}"
go_base="localhost/whilly-base/golang:$go_version-$suite"
if ! have_image "$go_base"; then
  say "base $go_base (Go from $goroot)"
  new_base "$(debian_rootfs "$suite")"
  cp -a "$goroot" "$mnt/usr/local/go"
  mkdir -p "$mnt/go"
  buildah config --env GOPATH=/go \
    --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --workingdir /go "$ctr"
  buildah commit --quiet --rm "$ctr" "$go_base" >/dev/null
fi

node_base="localhost/whilly-base/node:$node_tag"
if ! have_image "$node_base"; then
  say "base $node_base (node-linux-$node_arch@$node_version, npm@$npm_version)"
  (cd "$cache" &&
    { [ -s "node-linux-$node_arch-$node_version.tgz" ] || npm pack --silent "node-linux-$node_arch@$node_version" >/dev/null; } &&
    { [ -s "npm-$npm_version.tgz" ] || npm pack --silent "npm@$npm_version" >/dev/null; })
  new_base "$(debian_rootfs "$suite")"
  tar -C "$mnt/usr/local" --strip-components=1 -xzf "$cache/node-linux-$node_arch-$node_version.tgz" package/bin/node
  mkdir -p "$mnt/usr/local/lib/node_modules/npm"
  tar -C "$mnt/usr/local/lib/node_modules/npm" --strip-components=1 -xzf "$cache/npm-$npm_version.tgz"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$mnt/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$mnt/usr/local/bin/npx"
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env NODE_VERSION="$node_version" --cmd node "$ctr"
  buildah commit --quiet --rm "$ctr" "$node_base" >/dev/null
fi

# --- images ----------------------------------------------------------------------------
version="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
mkdir -p "$cache/go-mod" "$cache/go-build" "$cache/npm"
build() { # build NAME IMAGE
  say "build $2"
  buildah bud --quiet --layers --force-rm --isolation chroot --format docker \
    -f "deploy/docker/$1.Dockerfile" --ignorefile "deploy/docker/$1.Dockerfile.dockerignore" \
    --build-arg GO_IMAGE="$go_base" --build-arg NODE_IMAGE="$node_base" \
    --build-arg VERSION="$version" --build-arg COMMIT="$commit" \
    --build-arg DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    -v "$cache/go-mod:/go/pkg/mod" -v "$cache/go-build:/root/.cache/go-build" \
    -v "$cache/npm:/root/.npm" \
    -t "$2" . >/dev/null
}
build serve "$serve_image"
build worker "$worker_image"

# --- checks ----------------------------------------------------------------------------
# check IMAGE WANT CMD…: CMD runs in a container of IMAGE; its output must match WANT.
check() {
  local image="$1" want="$2"; shift 2
  local c out
  c="$(buildah from --quiet "$image")"
  ctrs+=("$c")
  out="$(buildah run --isolation chroot "$c" -- "$@" 2>&1)" || die "$image: $* failed: $out"
  grep -Eq -- "$want" <<<"$out" || die "$image: $*: got \"$out\", want /$want/"
  say "ok  ${image##*/}: $* -> $(head -n1 <<<"$out")"
}
check "$serve_image" "^whilly $version" whilly version
check "$serve_image" '^bubblewrap [0-9]' bwrap --version
check "$serve_image" '^git version [0-9]' git --version
check "$serve_image" "^$claude_version " claude --version
check "$worker_image" "^whilly-worker $version" whilly-worker --version
check "$worker_image" '^bubblewrap [0-9]' bwrap --version
check "$worker_image" '^git version [0-9]' git --version
check "$worker_image" "^$claude_version " claude --version
check "$worker_image" "$codex_version" codex --version
check "$worker_image" '^go version go[0-9]' go version

# serve on its embedded database: the serve image holds no PostgreSQL server (production
# gives it WHILLY_DATABASE_URL), so a scratch container of it gets Debian's, then serve
# runs as the image's user and must answer /readyz.
say "whilly serve on the embedded database (scratch container of $serve_image)"
c="$(buildah from --quiet "$serve_image")"
ctrs+=("$c")
mkdir -p "$cache/apt-archives/partial"
buildah run --isolation chroot --user 0:0 -v "$cache/apt-archives:/var/cache/apt/archives" "$c" -- sh -c \
  'apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null' ||
  die "installing postgresql in a scratch container of $serve_image"
# The poll runs inside the container, so that serve (and its PostgreSQL) stop with it.
port="${WHILLY_IMAGES_PORT:-18765}"
# shellcheck disable=SC2016 # the script is the container's, its $ are its own
buildah run --isolation chroot "$c" -- sh -c '
  WHILLY_LISTEN="127.0.0.1:$1" whilly serve >/tmp/serve.log 2>&1 &
  pid=$!
  ready=""
  for _ in $(seq 1 120); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$1/readyz" 2>/dev/null; then ready=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 1 # serve says nothing when it is ready: poll
  done
  kill -INT "$pid" 2>/dev/null; wait "$pid"
  # The embedded cluster outlives serve (the next whilly command reuses it): stop it.
  whilly db stop || true
  [ -n "$ready" ] || { cat /tmp/serve.log; exit 1; }' sh "$port" >&2 ||
  die "$serve_image: whilly serve did not answer /readyz on 127.0.0.1:$port (its log above)"
say "ok  whilly-serve:$tag: whilly serve answers /readyz on its embedded database"
say "done: $serve_image, $worker_image"
