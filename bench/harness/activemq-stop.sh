#!/usr/bin/env bash
# vendored from ../shared/bench/activemq-stop.sh, unchanged except for this line
# Stop the ActiveMQ started by activemq-start.sh: only the PID recorded in its pidfile.
set -uo pipefail
AMQ_RUN="${AMQ_RUN:-/tmp/amq-bench}"
PIDFILE="$AMQ_RUN/activemq.pid"
[[ -f "$PIDFILE" ]] || { echo "no pidfile $PIDFILE (not running?)"; exit 0; }
PID="$(cat "$PIDFILE")"
if ! kill -0 "$PID" 2>/dev/null; then echo "pid $PID not running; removing stale pidfile"; rm -f "$PIDFILE"; exit 0; fi
if ! tr '\0' ' ' <"/proc/$PID/cmdline" | grep -q 'activemq.jar'; then
  echo "pid $PID is not an activemq.jar process - refusing to kill it" >&2; exit 1
fi
RSS_KB=$(awk '/^VmRSS:/{print $2}' "/proc/$PID/status"); HWM_KB=$(awk '/^VmHWM:/{print $2}' "/proc/$PID/status")
kill -TERM "$PID"
for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$PID" 2>/dev/null; then echo "pid $PID still alive after 30s, SIGKILL"; kill -KILL "$PID"; fi
rm -f "$PIDFILE"
echo "stopped activemq pid $PID (rss before stop ${RSS_KB} kB, peak ${HWM_KB} kB)"
