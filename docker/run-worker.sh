#!/bin/sh
# One Locust worker of a compose run. docker/run-load.sh starts one master per traffic
# profile, and a worker quits with its master, so the worker is started again for the next
# profile, until the load is done ($ABSERVE_LOAD_DONE, written by run-load.sh); then it
# exits 0, so the container stops for good and `docker compose up` can return (a restart
# policy would bring it back forever).
set -u
done_file="${ABSERVE_LOAD_DONE:?ABSERVE_LOAD_DONE is not set}"
master="${ABSERVE_LOCUST_MASTER:-locust-master}"
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; exit 143' TERM INT
while [ ! -e "$done_file" ]; do
  locust -f /app/loadtest/locustfile.py --worker --master-host "$master" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ -e "$done_file" ]; then kill -TERM "$pid" 2>/dev/null; break; fi
    sleep 1
  done
  wait "$pid" 2>/dev/null
  pid=""
  [ -e "$done_file" ] || sleep 1
done
echo "run-worker: load done (exit code $(cat "$done_file")); worker exits" >&2
exit 0
