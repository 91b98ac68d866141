#!/usr/bin/env bash
# A Python 3.11 base image made from Debian's packages, for building deploy/image/Dockerfile where no
# registry serves python:3.11-slim (this project's CI and development machines reach Debian's
# packages and PyPI, nothing else).
#
#   deploy/image/local-base.sh [TAG]        (default corral/python-base:3.11; needs root and Docker)
#
# debootstrap (minbase) of Debian bookworm with python3.11 and venv (the build stage makes a venv
# for uv), then `docker import`. The image trusts what this machine trusts (its CA bundle is copied
# in), so pip and uv in the build stage work where a proxy re-signs TLS. An image of the same recipe
# (suite, packages, steps) is reused, so CI pays for debootstrap once per machine.
set -euo pipefail
tag=${1:-corral/python-base:3.11}
suite=${CORRAL_BASE_SUITE:-bookworm}
# The Debian archive this machine's apt uses (deb822 sources first, then the one-line format).
apt_mirror() {
  local uri
  uri=$(grep -hs -m1 '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | head -n1)
  [[ -n "$uri" ]] || uri=$(grep -hs -E '^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[a-z]+://' /etc/apt/sources.list \
    | grep -v security | awk '{for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' | head -n1)
  echo "$uri"
}
mirror=${CORRAL_DEBIAN_MIRROR:-$(apt_mirror)}
if [[ -z "$mirror" ]]; then
  echo "local-base: no Debian archive in this machine's apt sources; set CORRAL_DEBIAN_MIRROR" >&2
  exit 1
fi
packages=python3.11,python3.11-venv,python3-distutils,python3-pip-whl,python3-setuptools-whl,ca-certificates
# What the image is made of: an image with the same recipe is reused. Bump `steps` when the way it
# is made (below) changes.
steps=1
recipe=$(echo "$steps $suite $packages" | sha256sum | cut -c1-16)

if [[ "$(docker image inspect -f '{{ index .Config.Labels "corral.base-recipe" }}' "$tag" 2>/dev/null)" == "$recipe" ]]; then
  echo "local-base: $tag (recipe $recipe) is there already"
  exit 0
fi
as_root=()
if [[ $EUID -ne 0 ]] && command -v sudo >/dev/null 2>&1; then as_root=(sudo -n); fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "local-base: installing Debian's debootstrap"
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/corral-base.XXXXXX")
cleanup() { "${as_root[@]}" rm -rf "$work"; }
trap cleanup EXIT
rootfs=$work/rootfs
echo "local-base: debootstrap $suite ($packages) from $mirror"
if ! "${as_root[@]}" debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1; then
  tail -n 30 "$work/debootstrap.log" "$rootfs/debootstrap/debootstrap.log" 2>/dev/null || true
  echo "local-base: debootstrap failed" >&2
  exit 1
fi
"${as_root[@]}" cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
"${as_root[@]}" rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/debootstrap
"${as_root[@]}" tar -C "$rootfs" -c . | docker import \
  -c "LABEL corral.base-recipe=$recipe" \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  -c 'CMD ["python3.11"]' - "$tag" >/dev/null
echo "local-base: built $tag (recipe $recipe)"
