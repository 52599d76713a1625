#!/usr/bin/env bash
# Prints the directory of the Robot webservice's sample documents that the
# test suite reads (tests/hermetic/robot.rs): test/response/*.json of the Go module
# github.com/syself/hrobot-go (MIT, (c) 2019 newsletter2go.com), fetched
# from the Go module proxy into Go's module cache and read there; nothing
# of it is copied into this repository. The version is pinned here.
#
#   samples="$(scripts/robot-samples.sh | tail -n 1)"
set -euo pipefail

HROBOT_GO_VERSION="v0.2.7"

command -v go >/dev/null 2>&1 || {
  echo "robot-samples: go is not installed" >&2
  exit 1
}
# Outside any module: `go mod download` then only fetches (and verifies
# against the checksum database) the module asked for.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
dir="$(cd "$scratch" &&
  GOFLAGS=-mod=mod go mod download -json "github.com/syself/hrobot-go@${HROBOT_GO_VERSION}" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$dir/test/response" ]] || {
  echo "robot-samples: no test/response in github.com/syself/hrobot-go@${HROBOT_GO_VERSION} ($dir)" >&2
  exit 1
}
printf '%s\n' "$dir/test/response"
