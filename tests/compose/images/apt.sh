# Sourced by the image scripts: apt-get install from the base image's Debian sources, quietly.
export DEBIAN_FRONTEND=noninteractive
apt_install() {
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@" > /tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
  rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /tmp/apt.log
}
