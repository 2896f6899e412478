#!/usr/bin/env bash
# Sets up the ONNX Runtime shared library that models/onnx loads, into the
# git-ignored .cache/onnxruntime/lib/libonnxruntime.so.1. The library comes from
# the npm package onnxruntime-node (CPU build; no CUDA): `npm pack` fetches the
# tarball without running any install script, and only the one file is
# extracted. Idempotent: a no-op when the library is already there.
#
# Environment: ORT_VERSION (default 1.30.0), ORT_DIR (default .cache/onnxruntime).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${ORT_VERSION:-1.30.0}
DIR=${ORT_DIR:-.cache/onnxruntime}
LIB="$DIR/lib/libonnxruntime.so.1"

# An ELF shared object: the magic \x7fELF, and e_type (offset 16) ET_DYN = 3.
is_elf_so() { [[ "$(od -An -tx1 -N17 "$1" 2>/dev/null | tr -d ' \n')" =~ ^7f454c46.{24}03$ ]]; }

if [[ -s "$LIB" ]] && is_elf_so "$LIB"; then
	echo "onnxruntime: $(pwd)/$LIB"
	exit 0
fi

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) ARCH=x64 ;;
Linux/aarch64 | Linux/arm64) ARCH=arm64 ;;
*)
	echo "setup-ort: no onnxruntime-node build for $(uname -s)/$(uname -m); set ONNXRUNTIME_LIB or use --model sim" >&2
	exit 1
	;;
esac
command -v npm >/dev/null || { echo "setup-ort: npm is needed (apt-get install -y npm)" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "setup-ort: fetching onnxruntime-node@$VERSION (about 110 MB)…" >&2
(cd "$TMP" && npm pack --ignore-scripts --silent "onnxruntime-node@$VERSION" >/dev/null)
MEMBER="package/bin/napi-v6/linux/$ARCH/libonnxruntime.so.1"
tar -xzf "$TMP/onnxruntime-node-$VERSION.tgz" -C "$TMP" "$MEMBER"
if ! is_elf_so "$TMP/$MEMBER"; then
	echo "setup-ort: $MEMBER from onnxruntime-node@$VERSION is not an ELF shared object" >&2
	exit 1
fi
mkdir -p "$DIR/lib"
# Rename into place so that a concurrent reader never sees half a file.
cp "$TMP/$MEMBER" "$LIB.tmp.$$"
mv -f "$LIB.tmp.$$" "$LIB"
echo "$VERSION" >"$DIR/VERSION"
echo "onnxruntime: $(pwd)/$LIB"
