#!/bin/sh
# A throw-away PostgreSQL server for the compose check: a fresh cluster in the container,
# database and role "abserve" with the password $ABSERVE_PG_PASSWORD (scram-sha-256), on
# the stack's network only.
set -eu
: "${ABSERVE_PG_PASSWORD:?}"
bin="$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)"
data=/tmp/pgdata
printf '%s\n' "$ABSERVE_PG_PASSWORD" > /tmp/pw
"$bin/initdb" -D "$data" -U abserve --pwfile=/tmp/pw --auth=scram-sha-256 >/dev/null
rm -f /tmp/pw
echo "host all all 0.0.0.0/0 scram-sha-256" >> "$data/pg_hba.conf"
"$bin/postgres" -D "$data" -c listen_addresses='*' -c unix_socket_directories=/tmp -c fsync=off &
pid=$!
for _ in $(seq 1 30); do "$bin/pg_isready" -q -h /tmp && break; sleep 1; done
PGPASSWORD="$ABSERVE_PG_PASSWORD" "$bin/createdb" -h /tmp -U abserve abserve
touch /tmp/ready
trap 'kill -INT "$pid"' TERM INT
wait "$pid"
