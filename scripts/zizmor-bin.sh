#!/usr/bin/env bash
# Installs (or reuses from a cache) zizmor, the GitHub/Gitea Actions
# security linter the test suite runs on .gitea/workflows (offline). It is
# a Rust program published as a binary wheel on PyPI, installed here with
# pip into a throwaway virtualenv; only the binary is kept.
#
# The last line on stdout is the directory holding it; everything else goes
# to stderr. Usage:
#
#   zizmor_dir="$(scripts/zizmor-bin.sh | tail -n 1)"
#
# Needs python3 (with venv and pip) and PyPI. The version is pinned here and
# nowhere else; the cache key names it.
set -euo pipefail

ZIZMOR_VERSION="1.32.0"

log() { printf 'zizmor-bin: %s\n' "$*" >&2; }

command -v python3 >/dev/null 2>&1 || {
  log "python3 is not installed (needed to install zizmor ${ZIZMOR_VERSION} from PyPI)"
  exit 1
}

# shellcheck source=scripts/build-cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/build-cache.sh"
cache_open "zizmor-${ZIZMOR_VERSION}" zizmor

log "installing zizmor ${ZIZMOR_VERSION} from PyPI"
python3 -m venv "$work/venv" >&2
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "zizmor==${ZIZMOR_VERSION}" >&2
cp "$work/venv/bin/zizmor" "$bin_dir.tmp/zizmor"
"$bin_dir.tmp/zizmor" --version >&2

cache_close "zizmor ${ZIZMOR_VERSION} installed in $((SECONDS - start_time))s"
