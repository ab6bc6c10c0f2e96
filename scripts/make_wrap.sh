#!/usr/bin/env bash
# scripts/make_wrap.sh TARBALL BASE_URL
# Prints the Meson wrap file (wrap-file) for a release tarball of `meson dist`: a project puts
# it at subprojects/outbox.wrap and gets outbox with dependency('outbox-<name>'). Without
# network, Meson takes the tarball from subprojects/packagecache/ when its hash matches.
# BASE_URL: where the tarball is published (the wrap's source_url is BASE_URL/TARBALL's name).
# Meson reads subprojects/packagecache/ only for a wrap with a source_url, so there is one even
# when nothing will be downloaded.
set -euo pipefail
tarball=$1
name=$(basename "$tarball")
dir=${name%.tar.xz}
url=${2%/}/$name
hash=$(sha256sum "$tarball" | cut -d' ' -f1)
# What the tarball provides: outbox and outbox-<name> for each adapters/<name>/meson.build in it.
provides=outbox
while IFS= read -r adapter; do
    provides+=", outbox-$adapter"
done < <(tar -tf "$tarball" | sed -n "s|^$dir/adapters/\([a-z0-9_]*\)/meson.build\$|\1|p" | sort)
[[ $provides == *,* ]] || { echo "make_wrap: no adapters/<name>/meson.build in $tarball" >&2; exit 1; }
cat <<WRAP
[wrap-file]
directory = $dir
source_url = $url
source_filename = $name
source_hash = $hash

[provide]
dependency_names = $provides
WRAP
