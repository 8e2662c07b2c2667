#!/usr/bin/env bash
# Builds kube-apiserver once per machine (as root) from Debian bookworm's `kubernetes` source package
# (upstream 1.20.2, with its vendored Go dependencies; `apt-get source` needs deb-src lines, added
# here as /etc/apt/sources.list.d/torchx-airflow-deb-src.sources when there are none) with Debian's golang-1.19, offline apart from apt, into
# K8S_CACHE (default /var/cache/torchx-airflow/k8s). Later runs find $K8S_CACHE/bin/kube-apiserver and
# return at once. Also installs etcd-server (etcd for the API server) from Debian.
#
# The vendored github.com/modern-go/reflect2 1.0.1 crashes on Go >= 1.18 at the first custom-object
# request; it is replaced by the source of Debian's golang-github-modern-go-reflect2-dev (1.0.2).
set -euo pipefail
CACHE=${K8S_CACHE:-/var/cache/torchx-airflow/k8s}
BIN=$CACHE/bin/kube-apiserver

if [ -x "$BIN" ] && command -v etcd > /dev/null; then
  echo "kube-apiserver: $BIN (cached)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "building kube-apiserver needs root (apt-get); run: sudo bash $0" >&2
  exit 1
fi
mkdir -p "$CACHE"
# One build at a time per machine: a second caller waits for the first one's result.
exec 9> "$CACHE/.build.lock"
flock 9
if [ -x "$BIN" ] && command -v etcd > /dev/null; then
  echo "kube-apiserver: $BIN (built by another run)"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
SRC_LIST=/etc/apt/sources.list.d/torchx-airflow-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  cat > "$SRC_LIST" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends etcd-server golang-1.19-go rsync jq dpkg-dev \
  golang-github-modern-go-reflect2-dev > /dev/null

[ -x "$BIN" ] && { echo "kube-apiserver: $BIN (cached)"; exit 0; }

WORK=$CACHE/src
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
apt-get source --download-only kubernetes > /dev/null
# the upstream tree of the source package (with its vendor/ directory): Debian's packaging builds
# other binaries its own way, and `make WHAT=cmd/kube-apiserver` needs only the upstream build
dpkg-source --skip-debianization -x kubernetes_*.dsc tree > /dev/null
cd tree
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2

VERSION=$(dpkg-parsechangelog -S Version 2> /dev/null | sed 's/.*really//; s/-.*//' || echo 1.20.2)
export PATH=/usr/lib/go-1.19/bin:$PATH
# GOPATH mode, as Kubernetes 1.20's build sets it up under _output/
export GO111MODULE=off GOCACHE=$CACHE/gocache
export KUBE_GIT_VERSION=v$VERSION KUBE_GIT_TREE_STATE=clean
start=$(date +%s)
make WHAT=cmd/kube-apiserver
mkdir -p "$CACHE/bin"
cp _output/local/go/bin/kube-apiserver "$BIN.tmp" 2> /dev/null || cp _output/bin/kube-apiserver "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "kube-apiserver built in $(( $(date +%s) - start )) s: $BIN"
# The source tree and the Go build cache are large and no longer needed.
cd /
rm -rf "$WORK" "$CACHE/gocache"
