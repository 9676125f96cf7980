#!/usr/bin/env bash
# vendored from ../shared/bench/activemq-start.sh, unchanged except for this line
# Start the Debian-packaged ActiveMQ Classic 5.17.x as a background process WE own
# (not via systemd / init.d).  Prints startup time + RSS as one JSON line.
#
# Env knobs (all optional):
#   AMQ_CONF       activemq.xml to use        (default: ./activemq/conf/activemq.xml)
#   AMQ_RUN        run dir (data, logs, pid)  (default: /tmp/amq-bench)
#   AMQ_KEEP_DATA  1 = keep existing data dir (restart with persisted messages); default wipes it
#   AMQ_HEAP       JVM heap opts              (default: Debian's "-Xms512M -Xmx512M")
#   AMQ_WAIT_PORT  port that must accept connections before we call it started (default 61613)
#   AMQ_START_TIMEOUT seconds (default 90)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
AMQ_CONF="$(readlink -f "${AMQ_CONF:-$HERE/activemq/conf/activemq.xml}")"
AMQ_RUN="${AMQ_RUN:-/tmp/amq-bench}"
AMQ_DATA="$AMQ_RUN/data"
PIDFILE="$AMQ_RUN/activemq.pid"
AMQ_HEAP="${AMQ_HEAP:--Xms512M -Xmx512M}"
AMQ_WAIT_PORT="${AMQ_WAIT_PORT:-61613}"
AMQ_START_TIMEOUT="${AMQ_START_TIMEOUT:-90}"
AMQ_HOME=/usr/share/activemq
CONF_DIR="$HERE/activemq/conf"     # log4j.properties lives here (put on the broker classpath)

mkdir -p "$AMQ_RUN"
if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "activemq already running with pid $(cat "$PIDFILE") (pidfile $PIDFILE)" >&2; exit 1
fi
if [[ "${AMQ_KEEP_DATA:-0}" != "1" ]]; then rm -rf "$AMQ_DATA"; fi
mkdir -p "$AMQ_DATA"
if (exec 3<>"/dev/tcp/127.0.0.1/$AMQ_WAIT_PORT") 2>/dev/null; then
  echo "port $AMQ_WAIT_PORT already in use - refusing to start" >&2; exit 1
fi

T0=$(date +%s%N)
# Same JVM flags as /usr/bin/activemq uses for Java > 8 (Debian 5.17.2 script), plus our paths.
# xstream/jettison are added so STOMP 'transformation: jms-map-json' works (stats plugin replies).
nohup java $AMQ_HEAP -Dorg.apache.activemq.UseDedicatedTaskRunner=true \
  --add-reads=java.xml=java.logging \
  --add-opens java.base/java.security=ALL-UNNAMED --add-opens java.base/java.net=ALL-UNNAMED \
  --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED \
  --add-opens java.naming/javax.naming.spi=ALL-UNNAMED --add-opens java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED \
  --add-opens java.base/java.util.concurrent=ALL-UNNAMED --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED \
  --add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED --add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED \
  --add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED --add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED \
  --add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED \
  -Dlog4j.configuration="file:$CONF_DIR/log4j.properties" \
  -Dactivemq.classpath="$CONF_DIR:/usr/share/java/xstream.jar:/usr/share/java/jettison.jar" \
  -Dactivemq.home="$AMQ_HOME" -Dactivemq.base="$AMQ_RUN" -Dactivemq.conf="$CONF_DIR" -Dactivemq.data="$AMQ_DATA" \
  -jar "$AMQ_HOME/bin/activemq.jar" start "xbean:file:$AMQ_CONF" \
  >"$AMQ_RUN/stdout.log" 2>&1 </dev/null &
PID=$!
echo "$PID" >"$PIDFILE"

deadline=$(( $(date +%s) + AMQ_START_TIMEOUT ))
until (exec 3<>"/dev/tcp/127.0.0.1/$AMQ_WAIT_PORT") 2>/dev/null; do
  if ! kill -0 "$PID" 2>/dev/null; then echo "activemq (pid $PID) died during startup; see $AMQ_RUN/stdout.log" >&2; tail -20 "$AMQ_RUN/stdout.log" >&2; rm -f "$PIDFILE"; exit 1; fi
  if (( $(date +%s) > deadline )); then echo "activemq did not open port $AMQ_WAIT_PORT in ${AMQ_START_TIMEOUT}s; killing pid $PID" >&2; kill "$PID"; rm -f "$PIDFILE"; exit 1; fi
  sleep 0.05
done
T1=$(date +%s%N)
RSS_KB=$(awk '/^VmRSS:/{print $2}' "/proc/$PID/status")
printf '{"broker":"activemq","pid":%d,"startup_ms":%d,"rss_mb_at_start":%.1f,"conf":"%s","run_dir":"%s"}\n' \
  "$PID" $(( (T1 - T0) / 1000000 )) "$(echo "$RSS_KB/1024" | bc -l)" "$AMQ_CONF" "$AMQ_RUN"
