# Debian's redis-server and redis-cli (the compose file's health check).
set -euo pipefail
. /build/apt.sh
apt_install redis-server redis-tools
