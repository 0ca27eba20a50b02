#!/usr/bin/env bash
# Times a test command as a newcomer's machine runs it: a new clone, an
# empty Go build cache and none of the Debian packages the tests install,
# in a chroot of a minimal Debian 12 (debootstrap's minbase, with git and
# CA certificates) that holds only Go and the module cache besides.
#
#   sudo bench/fresh-machine.sh          # ./test.sh (the README's command)
#   sudo bench/fresh-machine.sh full     # ./test.sh full (CI's)
#
# Each run starts from the same base, made once (about 2 minutes) in
# $FRESH (default /var/tmp/deeplink-fresh); the time it prints includes
# the installs, from Debian's mirror and npm's registry, and every
# compile. It runs the commit checked out here (commit first). Needs root
# (chroot, mounts) and debootstrap; this machine's Go (go env GOROOT) is
# bound in read-only, its module cache (go env GOMODCACHE) as it is, and
# the certificate authorities it was given (/usr/local/share/ca-certificates)
# are the base's too, so that the chroot reaches what this machine reaches.
set -euo pipefail
mode=${1:-quick}
repo=$(cd "$(dirname "$0")/.." && pwd)
fresh=${FRESH:-/var/tmp/deeplink-fresh}
base=$fresh/base
root=$fresh/run

# unmount_all: every mount under $root, the deepest first.
unmount_all() {
  local m
  for m in $(awk -v r="$root" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m"
  done
}

if [ ! -d "$base" ]; then
  debootstrap --variant=minbase bookworm "$base.tmp" http://deb.debian.org/debian
  cp /etc/resolv.conf "$base.tmp/etc/resolv.conf"
  chroot "$base.tmp" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git ca-certificates >/dev/null'
  if [ -d /usr/local/share/ca-certificates ]; then
    cp -r /usr/local/share/ca-certificates/. "$base.tmp/usr/local/share/ca-certificates/"
    chroot "$base.tmp" update-ca-certificates >/dev/null
  fi
  mv "$base.tmp" "$base"
fi
unmount_all
if awk -v r="$root" 'index($2, r) == 1' /proc/mounts | grep -q .; then
  echo "fresh-machine.sh: $root still has mounts; not removing it" >&2
  exit 1
fi
rm -rf --one-file-system "$root"
cp -a "$base" "$root"
trap unmount_all EXIT
mkdir -p "$root/usr/local/go" "$root/modcache" "$root/src"
mount --bind "$(go env GOROOT)" "$root/usr/local/go"
mount -o remount,bind,ro "$root/usr/local/go"
mount --bind "$(go env GOMODCACHE)" "$root/modcache"
mount --bind "$repo" "$root/src"
mount -o remount,bind,ro "$root/src"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs tmpfs "$root/dev/shm"
cmd=./test.sh
[ "$mode" = full ] && cmd="./test.sh full"
# NODE_EXTRA_CA_CERTS: Node.js reads its own certificate authorities, not
# the system's, unless told (this machine's environment tells it so).
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  GOMODCACHE=/modcache GOPROXY="$(go env GOPROXY)" GOTOOLCHAIN=local \
  NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
  /bin/bash -c "set -e; git clone -q /src /root/deeplink && cd /root/deeplink && git log --oneline -1 &&
    start=\$(date +%s); $cmd; echo \"fresh machine: $cmd passed in \$(( \$(date +%s) - start )) s\""
