#!/usr/bin/env bash
# Times the test commands as a newcomer's machine would run them: a new
# clone, an empty Go build cache and none of the Debian packages the tests
# install, in a chroot of a minimal Debian 12 (debootstrap's minbase, with
# git and CA certificates) that holds only Go and the module cache besides.
#
#   sudo bench/fresh-machine.sh          # ./test.sh (the README's command)
#   sudo bench/fresh-machine.sh full     # ./test.sh full (CI's)
#
# Each run starts from the same base, made once (about 2 minutes) in
# $FRESH (default /var/tmp/deeplink-fresh): the run's time includes the
# installs, from Debian's mirror, and every compile. Needs root (chroot,
# mounts) and debootstrap; the machine's Go (go env GOROOT, read-only) and
# module cache (go env GOMODCACHE) are bound in.
set -euo pipefail
mode=${1:-quick}
repo=$(cd "$(dirname "$0")/.." && pwd)
fresh=${FRESH:-/var/tmp/deeplink-fresh}
base=$fresh/base
if [ ! -d "$base" ]; then
  debootstrap --variant=minbase bookworm "$base.tmp" http://deb.debian.org/debian
  cp /etc/resolv.conf "$base.tmp/etc/resolv.conf"
  chroot "$base.tmp" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git ca-certificates >/dev/null'
  mv "$base.tmp" "$base"
fi
root=$fresh/run
umount -R "$root" 2>/dev/null || true
rm -rf "$root"
cp -a "$base" "$root"
goroot=$(go env GOROOT)
modcache=$(go env GOMODCACHE)
mkdir -p "$root/usr/local/go" "$root/modcache" "$root/src"
cleanup() { umount -R "$root" 2>/dev/null || umount -lR "$root" || true; }
trap cleanup EXIT
mount --bind "$goroot" "$root/usr/local/go" && mount -o remount,bind,ro "$root/usr/local/go"
mount --bind "$modcache" "$root/modcache"
mount --bind "$repo" "$root/src" && mount -o remount,bind,ro "$root/src"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
cmd=./test.sh
[ "$mode" = full ] && cmd="./test.sh full"
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  GOMODCACHE=/modcache GOPROXY="$(go env GOPROXY)" GOTOOLCHAIN=local \
  /bin/bash -c "set -e; git clone -q /src /root/deeplink && cd /root/deeplink && git log --oneline -1 &&
    start=\$(date +%s); $cmd; echo \"fresh machine: $cmd passed in \$(( \$(date +%s) - start )) s\""
