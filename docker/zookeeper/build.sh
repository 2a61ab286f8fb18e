#!/bin/bash
# Build the lab's ZooKeeper image without any image registry.
#
#   1. debootstrap a minimal Debian bookworm tree with zookeeper and a headless JRE,
#      drop apt's caches and the docs, and `docker import` it as the base image;
#   2. `docker build` the Dockerfile beside this script FROM that base.
#
# Usage: docker/zookeeper/build.sh [--force]
# Environment: LAB_ZK_BUILD_TAG (default rebalance-lab/zookeeper:3.8),
#              LAB_ZK_BASE_TAG (default rebalance-lab/debian-zookeeper-base:bookworm),
#              DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${LAB_ZK_BUILD_TAG:-rebalance-lab/zookeeper:3.8}"
base="${LAB_ZK_BASE_TAG:-rebalance-lab/debian-zookeeper-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
force=0
[[ "${1:-}" == "--force" ]] && force=1

step() { printf '  %-60s' "$1"; step_started=$SECONDS; }
done_step() { echo "$((SECONDS - step_started)) s"; }

command -v docker >/dev/null || { echo "build.sh: docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build.sh: the Docker engine does not answer" >&2; exit 1; }

if [[ $force == 1 ]] || ! docker image inspect "$base" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { echo "build.sh: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
    [[ $(id -u) == 0 ]] || { echo "build.sh: debootstrap needs root" >&2; exit 1; }
    rootfs="$(mktemp -d /var/tmp/lab-zk-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    log="$rootfs.log"
    step "debootstrap bookworm (minbase)"
    if ! debootstrap --variant=minbase --include=zookeeper,openjdk-17-jre-headless \
            bookworm "$rootfs" "$mirror" >"$log" 2>&1; then
        echo "failed"; tail -20 "$log" >&2; exit 1
    fi
    done_step
    rm -f "$log"
    step "trim apt caches and docs"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
           "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
           "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log
    done_step
    step "docker import $base"
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
    done_step
fi

step "docker build $image"
if ! out=$(docker build -q --build-arg "BASE=$base" -t "$image" "$here" 2>&1); then
    echo "failed"; echo "$out" >&2; exit 1
fi
done_step
docker image inspect "$image" --format '  image {{.RepoTags}} {{.Size}} bytes'
