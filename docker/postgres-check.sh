#!/bin/sh
# A PostgreSQL server for the CPU stack, from the host's Debian PostgreSQL: database and role
# "abserve" with the password $ABSERVE_PG_PASSWORD (scram-sha-256), on the stack's network only.
# The compose check's is a throw-away cluster in the container (/tmp/pgdata, as user postgres);
# the `ledger` profile's (docker-compose.cpu.yml) keeps its cluster in the named volume
# ABSERVE_PG_DATA: started as root, it hands that folder to postgres, and a cluster it finds
# there is kept (the ledger of earlier runs).
set -eu
: "${ABSERVE_PG_PASSWORD:?}"
bin="$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)"
data="${ABSERVE_PG_DATA:-/tmp/pgdata}"
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$data"
  chown postgres: "$data"
  chmod 700 "$data"
  exec setpriv --reuid postgres --regid postgres --init-groups "$0"
fi
fresh=0
if [ ! -s "$data/PG_VERSION" ]; then
  fresh=1
  printf '%s\n' "$ABSERVE_PG_PASSWORD" > /tmp/pw
  "$bin/initdb" -D "$data" -U abserve --pwfile=/tmp/pw --auth=scram-sha-256 >/dev/null
  rm -f /tmp/pw
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$data/pg_hba.conf"
fi
"$bin/postgres" -D "$data" -c listen_addresses='*' -c unix_socket_directories=/tmp -c fsync=off &
pid=$!
for _ in $(seq 1 30); do "$bin/pg_isready" -q -h /tmp && break; sleep 1; done
[ "$fresh" = 0 ] || PGPASSWORD="$ABSERVE_PG_PASSWORD" "$bin/createdb" -h /tmp -U abserve abserve
touch /tmp/ready
trap 'kill -INT "$pid"' TERM INT
wait "$pid"
