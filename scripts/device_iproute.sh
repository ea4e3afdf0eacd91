#!/usr/bin/env bash
# Put iproute2's `ip` (Debian bookworm, with the libraries it needs) in .iproute/ (ignored by git), for
# machines that have root and network namespaces but no `ip`, such as the GPU machine, where
# benchmarks/scale_out.py and the two-host tests make their hosts with `ip netns`.
#
#     bash scripts/device_iproute.sh        # here, with network; then carry .iproute there and
#     export PATH=$PWD/.iproute:$PATH       # there, before the benchmark
#
# `.iproute/ip` runs the binary through the system's dynamic loader with `--library-path`, so the
# carried libraries serve `ip` alone: a command that `ip netns exec` starts does not inherit them.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.iproute
PACKAGES=(iproute2 libmnl0 libelf1 libbpf1 libcap2 libxtables12 libtirpc3 libbsd0 libmd0 libselinux1 libdb5.3
          libpcre2-8-0 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 zlib1g libzstd1)
rm -rf "$DEST" && mkdir -p "$DEST/debs" "$DEST/root"
(cd "$DEST/debs" && apt-get download "${PACKAGES[@]}" >/dev/null 2>&1)
for deb in "$DEST"/debs/*.deb; do dpkg -x "$deb" "$DEST/root"; done
rm -rf "$DEST/debs" "$DEST/root/usr/share" "$DEST/root/sbin" "$DEST/root/bin/ss" "$DEST/root/usr/lib/x86_64-linux-gnu/tc"
cat > "$DEST/ip" <<'WRAPPER'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
lib="$here/root/lib/x86_64-linux-gnu:$here/root/usr/lib/x86_64-linux-gnu"
exec /lib64/ld-linux-x86-64.so.2 --library-path "$lib" "$here/root/bin/ip" "$@"
WRAPPER
chmod +x "$DEST/ip"
"$DEST/ip" -V
du -sh "$DEST"
