#!/usr/bin/env bash
# fresh-check.sh: the README's install commands, as a newcomer on a fresh
# machine runs them — the closest check to "a fresh Debian container with
# only Go added" without a container engine.
#
#   bash scripts/fresh-check.sh             # on this machine, with nothing of the user's
#   bash scripts/fresh-check.sh --root DIR  # in a bare Debian tree, as root (see below)
#
# It reads the commands from README.md (so that it checks what the README
# says, not a copy): the apt-get line of "Install", then `go install
# ./cmd/sqllock` and `go run ./cmd/sqllock demo`, and requires the demo to
# end with every strategy's row correct. The repository is the HEAD commit
# of this clone, exported with git archive: it stands for the README's
# `git clone`, which needs the network to GitHub.
#
# Without --root: an empty HOME, GOPATH, GOMODCACHE and GOCACHE, PATH with
# only Go's bin and /usr/bin:/bin, and no environment but GOPROXY, GOSUMDB,
# GOFLAGS and GOTOOLCHAIN if set. The apt-get line is shown, not run (it
# would change this machine).
#
# With --root DIR: DIR is a Debian tree made by
#   debootstrap --variant=minbase bookworm DIR http://deb.debian.org/debian
# (about 4 minutes, 200 MB). The script copies this machine's Go
# (/usr/local/go, or GOROOT) into it, mounts /proc and /dev for the chroot
# (unmounted on exit), copies /etc/resolv.conf, and runs the apt-get line
# and the commands in the chroot as root. Run it on a fresh copy of DIR
# each time: the apt-get line installs into it. A machine whose network
# intercepts TLS with a CA of its own (a sandbox's egress proxy) keeps it in
# /usr/local/share/ca-certificates: those files alone are copied into DIR,
# where the README's ca-certificates package, once installed, adds them to
# its bundle; without the package there is still no bundle at all.
set -euo pipefail

root=""
case "${1:-}" in
--root)
	root=${2:?--root needs a directory}
	[ -x "$root/bin/sh" ] || { echo "fresh-check: $root is not a Debian tree (debootstrap it first)" >&2; exit 2; }
	[ "$(id -u)" = 0 ] || { echo "fresh-check: --root needs root (chroot, mount)" >&2; exit 2; }
	;;
"") ;;
*) echo "usage: $0 [--root DIR]" >&2; exit 2 ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
readme=$repo/README.md

# line PATTERN: the first line of README.md matching the extended regular
# expression PATTERN, without its trailing comment.
line() {
	local l
	l=$(grep -m1 -E "$1" "$readme" | sed -E 's/[[:space:]]+#[[:space:]].*$//') || true
	[ -n "$l" ] || { echo "fresh-check: README.md has no line matching $1" >&2; exit 1; }
	printf '%s\n' "$l"
}
apt_line=$(line '^apt-get update && apt-get install')
install_line=$(line '^go install \./cmd/sqllock')
demo_line=$(line '^go run \./cmd/sqllock demo')

goroot=$(go env GOROOT)
work=$(mktemp -d "${TMPDIR:-/tmp}/sqllock-fresh.XXXXXX")
mounted=()
cleanup() {
	local m
	for m in "${mounted[@]}"; do umount "$m" || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# script: what runs in the fresh environment, from the copy of the
# repository: each command timed, the demo's output kept and checked.
script="set -eu
cd \"\$1\"
t0=\$(date +%s)
$install_line
t1=\$(date +%s)
echo \"fresh-check: '$install_line' took \$((t1 - t0)) s\"
$demo_line | tee demo.out
t2=\$(date +%s)
echo \"fresh-check: '$demo_line' took \$((t2 - t1)) s\"
command -v sqllock || ls \"\$(go env GOPATH)/bin/sqllock\"
"

check_demo() {
	local out=$1
	grep -q '^no lock ' "$out" || { echo "fresh-check: the demo printed no table" >&2; exit 1; }
	if grep -E '^(one UPDATE|table|optimistic|pessimistic) ' "$out" | grep -v 'correct$'; then
		echo "fresh-check: a strategy's row is not correct" >&2
		exit 1
	fi
	echo "fresh-check: ok"
}

if [ -z "$root" ]; then
	mkdir -p "$work/home" "$work/src"
	git -C "$repo" archive HEAD | tar -x -C "$work/src"
	echo "fresh-check: not run here (it would change this machine): $apt_line"
	envs=(HOME="$work/home" GOPATH="$work/home/go" GOMODCACHE="$work/home/go/pkg/mod" GOCACHE="$work/home/.cache/go-build"
		PATH="$goroot/bin:$work/home/go/bin:/usr/bin:/bin" TMPDIR="$work")
	for v in GOPROXY GOSUMDB GOFLAGS GOTOOLCHAIN; do
		[ -z "${!v:-}" ] || envs+=("$v=${!v}")
	done
	env -i "${envs[@]}" /bin/sh -c "$script" sh "$work/src"
	check_demo "$work/src/demo.out"
	exit 0
fi

src=/root/sqllock-fresh
rm -rf "$root/usr/local/go" "$root$src"
mkdir -p "$root/usr/local" "$root$src"
cp -a "$goroot" "$root/usr/local/go"
git -C "$repo" archive HEAD | tar -x -C "$root$src"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for ca in /usr/local/share/ca-certificates/*.crt; do
	[ -e "$ca" ] || continue
	mkdir -p "$root/usr/local/share/ca-certificates"
	cp "$ca" "$root/usr/local/share/ca-certificates/"
	echo "fresh-check: this machine's own CA copied in: $ca"
done
for m in proc dev; do
	mount --bind "/$m" "$root/$m"
	mounted=("$root/$m" "${mounted[@]}")
done
chrooted() {
	env -i HOME=/root PATH=/usr/local/go/bin:/root/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		DEBIAN_FRONTEND=noninteractive chroot "$root" /bin/sh -c "$@"
}
echo "fresh-check: in $root: $apt_line"
t0=$(date +%s)
chrooted "$apt_line" >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; exit 1; }
echo "fresh-check: the apt-get line took $(($(date +%s) - t0)) s"
chrooted "$script" sh "$src"
check_demo "$root$src/demo.out"
