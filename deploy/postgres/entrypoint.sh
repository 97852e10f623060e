#!/bin/sh
# Initialise the cluster on first start (user, password, database from the environment), then
# run the server in the foreground on every interface.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
export PATH="$bin:$PATH"
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}" "${PGPORT:=5432}"
export PGPORT
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" > "$pwfile"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -A scram-sha-256 -E UTF8 \
        --no-instructions >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/tmp" -w start \
        >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        PGPASSWORD="$POSTGRES_PASSWORD" createdb -h /tmp -U "$POSTGRES_USER" "$POSTGRES_DB"
    fi
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp
