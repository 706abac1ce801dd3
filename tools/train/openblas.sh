#!/bin/sh
# openblas.sh DIR — puts Debian's OpenBLAS (libblas.so.3 and friends) in DIR
# without installing it, for LD_LIBRARY_PATH=DIR. Debian's python3-torch calls
# the system BLAS, which is the netlib reference one unless an optimised one
# is installed; OpenBLAS makes the training recipe ~10x faster. Does nothing
# if DIR is filled already or the system BLAS is OpenBLAS; fails (harmlessly:
# training then runs on the system BLAS) where apt cannot download.
set -eu
dir=$1
[ -f "$dir/libblas.so.3" ] && exit 0
case "$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null)" in
*openblas*) exit 0 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -q libopenblas0-pthread >/dev/null 2>&1 && dpkg-deb -x libopenblas0-pthread_*.deb x)
mkdir -p "$dir"
cp -a "$tmp"/x/usr/lib/*/openblas-pthread/* "$dir"/
echo "openblas: $dir"
