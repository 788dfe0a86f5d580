#!/usr/bin/env bash
# Build the fleet's images: mediafleet:cpu, mediafleet:gpu and mediafleet:redis.
#
#   bash docker/build.sh [cpu] [gpu] [redis]        (any folder; default: all three)
#
# Where an image registry answers, the bases are the official ones (python:3.11-slim-bookworm) and
# mediafleet:redis is the official redis:7.2-alpine under that name. Where none answers (checked
# once, by pulling the Python base with a short timeout), the base is made from Debian's packages
# with debootstrap (python3, venv, CA certificates; Debian 12 "bookworm", Python 3.11, imported as
# mediafleet-base:bookworm, made once and kept) and mediafleet:redis from Debian's redis-server
# (docker/Dockerfile.redis). Every build runs on the host's network (where dockerd runs without a
# bridge, builds have no other) and hands pip the host's CA bundle as a build secret, as behind a
# TLS-inspecting proxy; the bundle never reaches an image.
#
#   DOCKER            the client (default /usr/bin/docker where it exists: Debian's, BuildKit built
#                     in; a client that needs buildx cannot build here)
#   MEDIAFLEET_BASE   registry | debian: skip the check and use that kind of base
#   MEDIAFLEET_IMAGE  the images' repository name (default mediafleet)
#   DEBIAN_MIRROR     debootstrap's mirror (default http://deb.debian.org/debian)
#   CA_BUNDLE         the CA bundle pip trusts (default /etc/ssl/certs/ca-certificates.crt)
#
# Prints one line per image: its build time and size. Each image built here carries the label
# io.mediafleet.image; the one it replaces, left dangling, is removed (several GB a rebuild).
set -euo pipefail

root=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
docker=${DOCKER:-}
if [ -z "$docker" ]; then
    if [ -x /usr/bin/docker ]; then docker=/usr/bin/docker; else docker=docker; fi
fi
export DOCKER_BUILDKIT=1
name=${MEDIAFLEET_IMAGE:-mediafleet}
python_official=python:3.11-slim-bookworm
redis_official=redis:7.2-alpine
debian_base=mediafleet-base:bookworm
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(cpu gpu redis)
for target in "${targets[@]}"; do
    case "$target" in
        cpu|gpu|redis) ;;
        *) echo "build.sh: unknown image '$target' (cpu, gpu, redis)" >&2; exit 2 ;;
    esac
done

say() { printf 'build.sh: %s\n' "$*" >&2; }

have_image() { "$docker" image inspect "$1" >/dev/null 2>&1; }

# One quick check: a registry answers when the Python base is here or can be pulled in 30 s.
base=${MEDIAFLEET_BASE:-}
if [ -z "$base" ]; then
    if have_image "$python_official" || timeout 30 "$docker" pull -q "$python_official" >/dev/null 2>&1; then
        base=registry
    else
        base=debian
        say "no image registry answers: the bases come from Debian's packages"
    fi
fi

make_debian_base() {
    have_image "$debian_base" && return 0
    command -v debootstrap >/dev/null || { say "debootstrap is needed to make the base (apt-get install debootstrap)"; exit 1; }
    [ "$(id -u)" = 0 ] || { say "debootstrap needs root to make the base"; exit 1; }
    local dir started
    dir=$(mktemp -d /var/tmp/mediafleet-base.XXXXXX)
    # shellcheck disable=SC2064  # expand now: the folder is known now
    trap "rm -rf '$dir'" EXIT
    started=$(date +%s)
    say "making $debian_base with debootstrap (about a minute)"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
        bookworm "$dir/root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$dir/debootstrap.log" 2>&1 \
        || { tail -20 "$dir/debootstrap.log" >&2; exit 1; }
    rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"*
    tar -C "$dir/root" --numeric-owner -c . | "$docker" import \
        --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$debian_base" >/dev/null
    rm -rf "$dir"
    trap - EXIT
    say "$debian_base made in $(( $(date +%s) - started )) s"
}

python_image=$python_official
if [ "$base" = debian ]; then
    make_debian_base
    python_image=$debian_base
fi

secret=()
[ -r "$ca_bundle" ] && secret=(--secret "id=pip_cert,src=$ca_bundle")

report() {  # image, seconds
    local bytes
    bytes=$("$docker" image inspect -f '{{.Size}}' "$1")
    printf '%s: built in %d s, %d MB\n' "$1" "$2" "$(( bytes / 1000000 ))"
}

build() {  # image, dockerfile, build args...
    local image=$1 file=$2 started
    shift 2
    started=$(date +%s)
    say "building $image ($file, base ${python_image})"
    "$docker" build --network host "${secret[@]}" --build-arg "PYTHON_IMAGE=$python_image" "$@" \
        --label "io.mediafleet.image=$image" -f "$root/$file" -t "$image" "$root"
    report "$image" "$(( $(date +%s) - started ))"
    "$docker" image prune -f --filter "label=io.mediafleet.image=$image" >/dev/null
}

for target in "${targets[@]}"; do
    case "$target" in
        cpu) build "$name:cpu" docker/Dockerfile.cpu ;;
        gpu) build "$name:gpu" docker/Dockerfile.gpu ;;
        redis)
            if [ "$base" = registry ] && { have_image "$redis_official" \
                    || timeout 120 "$docker" pull -q "$redis_official" >/dev/null; }; then
                "$docker" tag "$redis_official" "$name:redis"
                report "$name:redis" 0
            else
                build "$name:redis" docker/Dockerfile.redis
            fi
            ;;
    esac
done
