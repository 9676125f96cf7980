# minibroker: two commands on a fresh machine.
#   make run    install the broker (the core and the fast extra: uvloop, mypyc) into .venv and start
#               it at once on 127.0.0.1:61613, STOMP over WebSocket on 61614 and the web console on
#               http://127.0.0.1:8161/ (data in ./data), the core compiled by mypyc in the background
#               for the next run where a C compiler is there; ARGS adds or overrides serve's
#               options: make run ARGS="--port 61623 --console-port 0"
#   make spark  add the spark extra (PySpark, pyarrow, numpy, matplotlib) for analyze and workload
#   make test   install everything the tests need (the dev, spark and fast extras; as root, the
#               Debian packages of the interoperability and browser tests) while the linters run
#               and the core compiles (make compiled), then the whole test suite on asyncio's own
#               event loop and the compiled core, with the edge's tests and the labs' live runs on
#               uvloop (the loop `make run` uses) beside it, then the core's tests again on the
#               interpreted core, on TEST_WORKERS and EDGE_WORKERS processes (4 and 2;
#               TEST_WORKERS=0: one, the passes in turn)
#   make compiled  compile the core with mypyc (the fast extra), in place beside its sources
#   make lint   ruff (lint and format check) and mypy, as configured in pyproject.toml
# Each install says what it installs, and why, before it starts.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ARGS   ?=
# One stamp per set of extras installed, each made again when the project's metadata changes.
RUN_STAMP   := $(VENV)/.installed-run
SPARK_STAMP := $(VENV)/.installed-spark
STAMP       := $(VENV)/.installed

.PHONY: run spark test test-prepare test-clients lint venv console bench clean compiled net-stomp ruby-stomp php-stomp browser activemq rabbitmq lab-readmes

$(PY):
	@echo "creating $(VENV) (Python virtual environment) ..."
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# What the broker needs: the core, uvloop and mypy (the fast extra: mypy ships mypyc). No PySpark, no npm: the
# console's two libraries are in the package (minibroker/edge/console/static/vendor/).
$(RUN_STAMP): $(PY) pyproject.toml
	@echo "installing minibroker with the fast extra (uvloop, mypyc) into $(VENV) ..."
	$(PY) -m pip install --quiet -e '.[fast]'
	touch $@

# analyze and workload: PySpark (and Java 17 for its jobs), pyarrow, numpy, matplotlib.
$(SPARK_STAMP): $(RUN_STAMP)
	@echo "installing the spark extra (PySpark, pyarrow, numpy, matplotlib) into $(VENV) for analyze and workload ..."
	$(PY) -m pip install --quiet -e '.[fast,spark]'
	touch $@

spark: $(SPARK_STAMP)

# Everything the tests and the linters need, in one install (one resolution, one build of the
# project) where the run and spark extras are not there yet; it stands for their stamps too.
$(STAMP): $(PY) pyproject.toml
	@echo "installing the fast, spark and dev extras (uvloop, mypyc; PySpark, pyarrow, numpy, matplotlib; pytest, stomp.py, selenium, ruff ...) into $(VENV) for the tests ..."
	$(PY) -m pip install --quiet -e '.[dev,spark,fast]'
	touch $(RUN_STAMP) $(SPARK_STAMP) $@

venv: $(STAMP)

# stomp.js for the interoperability test (tests/interop/test_stompjs.py), from the lock file.
STOMPJS := tests/interop/stompjs
$(STOMPJS)/node_modules/.installed: $(STOMPJS)/package-lock.json
	@echo "installing stomp.js (npm ci, pinned by $(STOMPJS)/package-lock.json) for tests/interop/test_stompjs.py ..."
	npm ci --prefix $(STOMPJS) --no-audit --no-fund --loglevel=error
	touch $@

# Third-party clients from Debian for their interoperability tests, each installed when it
# is missing and this user may install it (root); otherwise that client's test says why it
# skips. $(call debian_client,CHECK,PACKAGES,TEST): install PACKAGES unless CHECK succeeds.
# Installs may run beside each other (`make test` prepares in parallel): each waits for dpkg's lock.
APT := DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600
define debian_client
	@$(1) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $(2) (Debian) for $(3) ..."; \
	    $(APT) install $(2) >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 && $(APT) install $(2) >/dev/null 2>&1; } \
	      || echo "note: could not install $(2): $(3) will skip"; \
	  else echo "note: not installed: $(2) (as root: apt-get install $(2)); $(3) will skip"; fi; }
endef

# The web console's libraries (stomp.js, uPlot) are committed in minibroker/edge/console/static/vendor/
# (tests/edge/test_console_vendor.py holds each to the SHA-256 minibroker/edge/console/vendor.json pins).
# `make console` vendors them again from npm, pinned by console/package-lock.json, and copies a
# file only with its pinned hash: after it, `git status` shows the committed files unchanged.
CONSOLE_NPM := console
console: $(RUN_STAMP)
	@echo "installing the console's libraries (npm ci, pinned by $(CONSOLE_NPM)/package-lock.json) ..."
	npm ci --prefix $(CONSOLE_NPM) --no-audit --no-fund --loglevel=error
	$(PY) -m minibroker.edge.console $(CONSOLE_NPM)/node_modules

# Perl's Net::Stomp.
net-stomp:
	$(call debian_client,perl -MNet::Stomp -e1,libnet-stomp-perl,tests/interop/test_net_stomp.py)

# Ruby's stomp gem.
ruby-stomp:
	$(call debian_client,ruby -rstomp -e1,ruby-stomp,tests/interop/test_ruby_stomp.py)

# PHP's PECL stomp extension, and the PHP command line to run it.
php-stomp:
	$(call debian_client,php -r 'exit(class_exists("Stomp") ? 0 : 1);',php-cli php-stomp,tests/interop/test_php_stomp.py)

# Debian's ActiveMQ Classic (and the Java it runs on) for `minibroker lab run N --against
# activemq` and its test (tests/labs/test_lab_activemq.py); the broker is started only by the
# labs and the benchmarks, on ports of their own. xstream and jettison carry its statistics
# plugin's map messages over STOMP (transformation jms-map-json: `doctor --live`). Jetty 9 and
# Jolokia serve the broker's MBeans at /api/jolokia as its web console would (Debian's package
# has no web console): `doctor --live http://...` reads them (clients.activemq.JOLOKIA_CLASSPATH).
activemq:
	$(call debian_client,{ [ -f /usr/share/activemq/bin/activemq.jar ] && [ -f /usr/share/java/xstream.jar ] && [ -f /usr/share/java/jettison.jar ] && [ -f /usr/share/java/jolokia-core.jar ] && [ -f /usr/share/java/jetty9-servlet.jar ] && command -v java; },activemq libxstream-java libjettison-java libjetty9-java libjolokia-core-java,tests/labs/test_lab_activemq.py and tests/doctor/test_doctor_live_labs.py)

# Debian's RabbitMQ 3.10 (Erlang, its STOMP and management plugins) for `minibroker lab run N
# --against rabbitmq` and its tests; never the system service: clients/rabbitmq.py starts a node
# of its own on ports of its own.
RABBITMQ_SERVER := /usr/lib/rabbitmq/bin/rabbitmq-server
rabbitmq:
	$(call debian_client,[ -x $(RABBITMQ_SERVER) ],rabbitmq-server,tests/interop/test_rabbitmq.py and the RabbitMQ comparisons)

# Debian's Chromium and its driver for the browser tests (stomp.js over WebSocket, the
# console). No browser is downloaded from anywhere else.
browser:
	$(call debian_client,{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; },chromium chromium-driver,the browser tests)

# The compiled core: mypyc (the fast extra) compiles the modules minibroker/corebuild.py names
# (the codec, the connection, the destinations, the core) into C extensions beside their
# sources (*.so, ignored by git; the source stays the reference a student reads). It needs a
# C compiler and Python's headers: as root they are installed from Debian; otherwise the broker
# runs interpreted and its first log line says so. A build whose sources have not changed is
# kept (minibroker/compiled.json holds their digests); one whose sources changed is rebuilt
# here; until then the sources run, and serve's first log line says the build is stale.
HAVE_CC := { command -v cc && $(PY) -c 'import sys; import sysconfig; import os.path as p; sys.exit(not p.exists(sysconfig.get_paths()["include"] + "/Python.h"))'; }
CORE_IS_FRESH := $(PY) -c 'import sys; from minibroker import corebuild; sys.exit(corebuild.current().name != "compiled")'
CORE_BUILD = $$($(PY) -c 'from minibroker import corebuild; print(corebuild.current().name)')
compiled: $(RUN_STAMP)
	$(call debian_client,$(HAVE_CC),gcc libc6-dev python3-dev,the compiled core)
	@if MINIBROKER_CORE= $(CORE_IS_FRESH) 2>/dev/null; then echo "the compiled core is up to date"; \
	elif $(HAVE_CC) >/dev/null 2>&1; then \
	  echo "compiling the core with mypyc (the fast extra; about 2.5 minutes of CPU, log in build/compile.log) ..."; \
	  mkdir -p build; \
	  MINIBROKER_COMPILE=1 $(PY) setup.py build_ext --inplace -j 2 > build/compile.log 2>&1 \
	    || { tail -20 build/compile.log; echo "the core's compile failed (build/compile.log)"; exit 1; }; \
	  MINIBROKER_CORE=compiled $(CORE_IS_FRESH) || { echo "the compiled core does not load"; exit 1; }; \
	else echo "note: no C compiler or Python headers: the broker runs interpreted (core: interpreted)"; fi

# `make run` starts the broker at once: where the compiled core is missing or stale and a C
# compiler is there, it is compiled in the background while this run goes on interpreted (its
# first log line says so: the background build's process is in build/compiling.pid while it
# lasts, which minibroker/corebuild.py reads), and the next `make run` uses it. `make compiled`
# builds it first.
run: $(RUN_STAMP)
	@if ! MINIBROKER_CORE= $(CORE_IS_FRESH) 2>/dev/null && $(HAVE_CC) >/dev/null 2>&1; then \
	  echo "compiling the core with mypyc in the background (log in build/compile.log): this run is interpreted, the next one compiled"; \
	  mkdir -p build; \
	  ( sh -c 'echo $$$$ > build/compiling.pid; MINIBROKER_COMPILE=1 $(PY) setup.py build_ext --inplace -j 2 > build/compile.log 2>&1; rm -f build/compiling.pid' & ); \
	fi
	$(VENV)/bin/minibroker serve --host 127.0.0.1 --port 61613 --data-dir ./data $(ARGS)

# Byte-compile first: Python 3.11.7's compiler can fail spuriously when two threads
# compile at once (CPython gh-106905), e.g. a first import in a test while a broker
# thread compiles a selector; with everything compiled, imports compile nothing.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The suite runs on asyncio's own loop, but for the labs' live runs; then the tests of the edge
# (sockets, WebSocket, the console, stalled sockets, third-party clients) run again on uvloop,
# with the labs' live runs, on the loop `make run` and `minibroker lab run --live` use (each
# live run is minutes of wall clock: once is enough; the edge beneath them runs on both loops).
LIVE_LABS  := tests/labs/test_labs.py::test_every_live_run_keeps_its_promise
# The core's tests, run on both builds of the core (the compiled one with the whole suite), and
# the tests that replace a method of a core's object (broker_support.patches_a_core_object: a
# compiled object has none to replace), which run on the interpreted one only.
CORE_TESTS := tests/*/test_core_*.py tests/protocol/test_codec.py tests/protocol/test_message.py \
              tests/destinations/test_seqfifo.py tests/connection/test_connection_state.py \
              tests/core/test_cross_queue_transactions.py tests/core/test_corebuild.py \
              tests/edge/test_server.py::test_a_bug_in_the_core_ends_only_that_connection_with_an_error \
              tests/bench/test_bench_reliability.py::test_fuzz_counts_a_connection_end_that_leaves_something_behind \
              tests/labs/test_lab_starving_live.py::test_blocked_cursors_retry_in_the_order_they_blocked
EDGE_TESTS := tests/edge/test_server.py tests/edge/test_server_hostile_clients.py tests/edge/test_websocket.py \
              tests/labs/test_lab_stalled_socket.py tests/interop/test_stomp_py.py tests/edge/test_metrics.py tests/edge/test_eventloop.py \
              $(LIVE_LABS)

# Much of the suite's time is waiting (live labs paced by the clock, brokers and JVMs
# starting), so it runs on TEST_WORKERS processes (pytest-xdist), more than the cores: on 2
# cores the CPU is busy for the first half of the asyncio pass and half idle in the second,
# which waits on brokers; 4 workers took that pass from 788 s to 704 s against 3. Every test
# that runs Spark is on one of them, so one Spark JVM runs at a time (tests/conftest.py).
# TEST_WORKERS=0 runs it in this process.
# The uvloop pass runs beside the asyncio pass, on EDGE_WORKERS processes of its own: its
# live labs are paced by the wall clock and use little CPU, which the asyncio pass's Spark
# worker, its longest path, has a use for. Its output is kept in $(EDGE_LOG) and printed
# after the asyncio pass's; `make test` fails when either pass fails. TEST_WORKERS=0 runs
# the two passes one after the other, in this process. The uvloop pass leaves out the tests
# that run Spark (an analysis is the same on either loop): the asyncio pass's JVM stays the
# only one.
TEST_WORKERS ?= 4
EDGE_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)
EDGE_XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(EDGE_WORKERS) --dist loadgroup)
EDGE_LOG := .pytest-uvloop.log
ASYNCIO_PASS = MINIBROKER_CORE=$(CORE_BUILD) MINIBROKER_LOOP=asyncio $(PY) -m pytest -q $(XDIST) --durations=25 --deselect $(LIVE_LABS)
UVLOOP_PASS  = MINIBROKER_CORE=$(CORE_BUILD) MINIBROKER_LOOP=uvloop $(PY) -m pytest -q $(EDGE_XDIST) -m 'not spark' $(EDGE_TESTS)
# The core's tests again on the interpreted core, where the suite ran on the compiled one.
INTERPRETED_PASS = if [ "$(CORE_BUILD)" = compiled ]; then MINIBROKER_CORE=interpreted MINIBROKER_LOOP=asyncio $(PY) -m pytest -q $(XDIST) $(CORE_TESTS); fi

# MINIBROKER_CORE=compiled where `make compiled` built it (a test fails if it is then not loaded).
# What the tests need besides the venv, prepared side by side: the linters and the core's compile
# use the CPU, the downloads and Debian's installs mostly wait (those run one after another:
# dpkg takes one install at a time).
test-prepare: $(STAMP)
	@$(MAKE) --no-print-directory -j3 lint compiled test-clients

test-clients: $(STAMP) $(STOMPJS)/node_modules/.installed
	@for client in net-stomp ruby-stomp php-stomp browser activemq rabbitmq; do $(MAKE) --no-print-directory $$client || exit 1; done

test: test-prepare
	$(PY) -m compileall -q minibroker storage clients tests examples bench > /dev/null
ifeq ($(TEST_WORKERS),0)
	$(ASYNCIO_PASS)
	$(UVLOOP_PASS)
	$(INTERPRETED_PASS)
else
	@echo "running the edge's tests and the labs' live runs on uvloop in the background (output in $(EDGE_LOG), shown after the asyncio pass) ..."
	@$(UVLOOP_PASS) > $(EDGE_LOG) 2>&1 & edge=$$!; \
	  $(ASYNCIO_PASS); suite=$$?; \
	  wait $$edge; edge_status=$$?; \
	  echo "== on uvloop: the edge's tests and the labs' live runs (exit status $$edge_status) =="; \
	  cat $(EDGE_LOG); \
	  $(INTERPRETED_PASS); core=$$?; \
	  [ $$suite -eq 0 ] && [ $$edge_status -eq 0 ] && [ $$core -eq 0 ]
endif

# Each lab README ends with its run's output, verbatim (tests/labs/test_labs.py compares them):
# rewrite those blocks after changing a lab.
lab-readmes: $(STAMP)
	$(PY) -m clients.labs.readme

bench: $(STAMP)
	$(PY) bench/compare.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data build *.egg-info $(STOMPJS)/node_modules $(CONSOLE_NPM)/node_modules minibroker/compiled.json
	find minibroker -name '*.so' -delete; rm -f minibroker_core__mypyc*.so
