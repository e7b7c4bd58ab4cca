#!/bin/sh
# bench-baseline.sh REV: builds the wcache CLI and its mock plugin of git
# revision REV for `make bench BASELINE=REV` and prints the folder that
# holds them. The revision is checked out in a detached git worktree under
# ${TMPDIR:-/tmp} (outside this tree, which stays as it was), built with
# CGO_ENABLED=0 go build, and the worktree removed again; the binaries stay
# in ${TMPDIR:-/tmp}/wcache-bench-baseline-<commit>/bin and a later run of
# the same commit reuses them. Progress goes to stderr; a failure exits
# non-zero with git's or go's message.
set -eu
rev=${1:?usage: bench-baseline.sh REV}
commit=$(git rev-parse --verify --quiet "$rev^{commit}") || { echo "bench-baseline: $rev is no commit here" >&2; exit 1; }
root=${TMPDIR:-/tmp}/wcache-bench-baseline-$commit
if [ -x "$root/bin/wcache" ] && [ -x "$root/bin/wcache-backend-mock" ]; then
	echo "$root/bin"
	exit 0
fi
mkdir -p "$root"
src=$(mktemp -d "$root/src.XXXXXX")
trap 'git worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"; git worktree prune' EXIT
echo "bench-baseline: building $rev ($commit) in $src" >&2
git worktree add --quiet --detach "$src" "$commit" >&2
# ./cmd/wcache and ./plugins/mock: the paths at da24eaa and since; the mock
# plugin is pure Go.
(cd "$src" && CGO_ENABLED=0 go build -o "$root/bin.new/wcache" ./cmd/wcache &&
	CGO_ENABLED=0 go build -o "$root/bin.new/wcache-backend-mock" ./plugins/mock) >&2
rm -rf "$root/bin"
mv "$root/bin.new" "$root/bin"
echo "$root/bin"
