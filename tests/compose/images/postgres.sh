# Debian's PostgreSQL, started as the postgres image is (postgres-entrypoint.sh).
set -euo pipefail
. /build/apt.sh
apt_install postgresql-15 postgresql-client-15 gosu
install -m 755 /build/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
