#!/usr/bin/env bash
# Installs the Debian packages loom builds and tests with. Idempotent; run as root (or with sudo).
set -euo pipefail
pkgs=(cmake gcc make pkg-config libopenblas-openmp-dev libpcre2-dev libcjson-dev libopenmpi-dev openmpi-bin)
[ "${LOOM_WITH_FUZZ:-0}" = 1 ] && pkgs+=(clang libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
