#!/usr/bin/env bash
# What docker-compose.yml uses of the postgres image: POSTGRES_USER/PASSWORD/DB make the first user
# and database, /docker-entrypoint-initdb.d/*.sql run once, data in /var/lib/postgresql/data.
set -euo pipefail
PGDATA=/var/lib/postgresql/data
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
as_pg() { gosu postgres "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s' "$POSTGRES_PASSWORD" > /tmp/pwfile
  chown postgres /tmp/pwfile
  as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile --auth-host=scram-sha-256 \
    --auth-local=trust > /dev/null
  rm /tmp/pwfile
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
  if [ "${POSTGRES_DB:-$POSTGRES_USER}" != postgres ]; then
    as_pg psql -q -U "$POSTGRES_USER" -d postgres -c "CREATE DATABASE \"${POSTGRES_DB:-$POSTGRES_USER}\""
  fi
  for f in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$f" ] && as_pg psql -q -U "$POSTGRES_USER" -d "${POSTGRES_DB:-$POSTGRES_USER}" -f "$f"
  done
  as_pg pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
fi
exec gosu postgres postgres -D "$PGDATA" -c listen_addresses='*'
