# minibroker: two commands on a fresh machine.
#   make run    start the broker on 127.0.0.1:61613, STOMP over WebSocket on 61614 and the
#               web console on http://127.0.0.1:8161/ (data in ./data); ARGS adds or
#               overrides serve's options: make run ARGS="--port 61623 --console-port 0"
#   make test   run the linters, then the whole test suite on asyncio's own event loop,
#               then the edge's tests and the labs again on uvloop (the loop `make run` uses), each on
#               TEST_WORKERS processes (3; TEST_WORKERS=0: one)
#   make lint   ruff (lint and format check) and mypy, as configured in pyproject.toml
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: run test lint venv bench clean net-stomp ruby-stomp php-stomp browser activemq rabbitmq lab-readmes

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Re-install whenever the project's metadata changes.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,spark,fast]'
	touch $(STAMP)

venv: $(STAMP)

# stomp.js for the interoperability test (tests/test_stompjs.py), from the lock file.
STOMPJS := tests/interop/stompjs
$(STOMPJS)/node_modules/.installed: $(STOMPJS)/package-lock.json
	npm ci --prefix $(STOMPJS) --no-audit --no-fund --loglevel=error
	touch $@

# Third-party clients from Debian for their interoperability tests, each installed when it
# is missing and this user may install it (root); otherwise that client's test says why it
# skips. $(call debian_client,CHECK,PACKAGES,TEST): install PACKAGES unless CHECK succeeds.
APT := DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends
define debian_client
	@$(1) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    $(APT) install $(2) >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 && $(APT) install $(2) >/dev/null 2>&1; } \
	      || echo "note: could not install $(2): $(3) will skip"; \
	  else echo "note: not installed: $(2) (as root: apt-get install $(2)); $(3) will skip"; fi; }
endef

# The web console's libraries (stomp.js, uPlot), pinned by console/package-lock.json and
# copied into the served files only with the hashes minibroker/console/vendor.json pins.
CONSOLE_NPM := console
VENDORED    := minibroker/console/static/vendor/.installed
$(VENDORED): $(CONSOLE_NPM)/package-lock.json minibroker/console/vendor.json $(STAMP)
	npm ci --prefix $(CONSOLE_NPM) --no-audit --no-fund --loglevel=error
	$(PY) -m minibroker.console.vendor $(CONSOLE_NPM)/node_modules
	touch $@

console: $(VENDORED)

# Perl's Net::Stomp.
net-stomp:
	$(call debian_client,perl -MNet::Stomp -e1,libnet-stomp-perl,tests/test_net_stomp.py)

# Ruby's stomp gem.
ruby-stomp:
	$(call debian_client,ruby -rstomp -e1,ruby-stomp,tests/test_ruby_stomp.py)

# PHP's PECL stomp extension, and the PHP command line to run it.
php-stomp:
	$(call debian_client,php -r 'exit(class_exists("Stomp") ? 0 : 1);',php-cli php-stomp,tests/test_php_stomp.py)

# Debian's ActiveMQ Classic (and the Java it runs on) for `minibroker lab run N --against
# activemq` and its test (tests/test_lab_activemq.py); the broker is started only by the
# labs and the benchmarks, on ports of their own. xstream and jettison carry its statistics
# plugin's map messages over STOMP (transformation jms-map-json: `doctor --live`).
activemq:
	$(call debian_client,{ [ -f /usr/share/activemq/bin/activemq.jar ] && [ -f /usr/share/java/xstream.jar ] && [ -f /usr/share/java/jettison.jar ] && command -v java; },activemq libxstream-java libjettison-java,tests/test_lab_activemq.py and tests/test_doctor_live_labs.py)

# Debian's RabbitMQ 3.10 (Erlang, its STOMP and management plugins) for `minibroker lab run N
# --against rabbitmq` and its tests; never the system service: clients/rabbitmq.py starts a node
# of its own on ports of its own.
RABBITMQ_SERVER := /usr/lib/rabbitmq/bin/rabbitmq-server
rabbitmq:
	@[ -x $(RABBITMQ_SERVER) ] || echo "installing Debian's rabbitmq-server for tests/test_rabbitmq.py"
	$(call debian_client,[ -x $(RABBITMQ_SERVER) ],rabbitmq-server,tests/test_rabbitmq.py)

# Debian's Chromium and its driver for the browser tests (stomp.js over WebSocket, the
# console). No browser is downloaded from anywhere else.
browser:
	$(call debian_client,{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; },chromium chromium-driver,the browser tests)

run: $(STAMP) $(VENDORED)
	$(VENV)/bin/minibroker serve --host 127.0.0.1 --port 61613 --data-dir ./data $(ARGS)

# Byte-compile first: Python 3.11.7's compiler can fail spuriously when two threads
# compile at once (CPython gh-106905), e.g. a first import in a test while a broker
# thread compiles a selector; with everything compiled, imports compile nothing.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The suite runs on asyncio's own loop; then the tests of the edge (sockets, WebSocket, the
# console, stalled sockets, third-party clients) and the labs' live runs run again on uvloop,
# the loop `make run` and `minibroker lab run` use.
EDGE_TESTS := tests/test_server.py tests/test_server_hostile_clients.py tests/test_websocket.py \
              tests/test_lab_stalled_socket.py tests/test_stomp_py.py tests/test_metrics.py tests/test_eventloop.py \
              tests/test_labs.py

# Most of the suite's time is waiting (live labs paced by the clock, brokers and JVMs
# starting), so it runs on TEST_WORKERS processes (pytest-xdist); the tests that share the
# SparkSession stay on one of them (tests/conftest.py). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

test: lint $(STAMP) $(VENDORED) $(STOMPJS)/node_modules/.installed net-stomp ruby-stomp php-stomp browser activemq rabbitmq
	$(PY) -m compileall -q minibroker storage clients tests examples bench > /dev/null
	MINIBROKER_LOOP=asyncio $(PY) -m pytest -q $(XDIST) --durations=25
	MINIBROKER_LOOP=uvloop $(PY) -m pytest -q $(XDIST) $(EDGE_TESTS)

# Each lab README ends with its run's output, verbatim (tests/test_labs.py compares them):
# rewrite those blocks after changing a lab.
lab-readmes: $(STAMP)
	$(PY) -m clients.labs.readme

bench: $(STAMP)
	$(PY) bench/compare.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data build *.egg-info $(STOMPJS)/node_modules $(CONSOLE_NPM)/node_modules minibroker/console/static/vendor
