# minibroker: two commands on a fresh machine.
#   make run    start the broker on 127.0.0.1:61613, STOMP over WebSocket on 61614 (data in ./data)
#   make test   run the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test venv bench clean net-stomp browser

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Re-install whenever the project's metadata changes.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

venv: $(STAMP)

# stomp.js for the interoperability test (tests/test_stompjs.py), from the lock file.
STOMPJS := tests/interop/stompjs
$(STOMPJS)/node_modules/.installed: $(STOMPJS)/package-lock.json
	npm ci --prefix $(STOMPJS) --no-audit --no-fund --loglevel=error
	touch $@

# Perl's Net::Stomp for tests/test_net_stomp.py: Debian's package, installed when it is
# missing and this user may install it (root); otherwise that one test says why it skips.
APT := DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends
net-stomp:
	@perl -MNet::Stomp -e1 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    $(APT) install libnet-stomp-perl >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 && $(APT) install libnet-stomp-perl >/dev/null 2>&1; } \
	      || echo "note: could not install libnet-stomp-perl: tests/test_net_stomp.py will skip"; \
	  else echo "note: Net::Stomp is missing (as root: apt-get install libnet-stomp-perl): tests/test_net_stomp.py will skip"; fi; }

# Debian's Chromium and its driver for the browser tests (stomp.js over WebSocket, the
# console): installed when missing and this user may (root); otherwise those tests skip,
# saying why. No browser is downloaded from anywhere else.
browser:
	@{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    $(APT) install chromium chromium-driver >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 && $(APT) install chromium chromium-driver >/dev/null 2>&1; } \
	      || echo "note: could not install chromium chromium-driver: the browser tests will skip"; \
	  else echo "note: Chromium is missing (as root: apt-get install chromium chromium-driver): the browser tests will skip"; fi; }

run: $(STAMP)
	$(VENV)/bin/minibroker serve --host 127.0.0.1 --port 61613 --data-dir ./data

# Byte-compile first: Python 3.11.7's compiler can fail spuriously when two threads
# compile at once (CPython gh-106905), e.g. a first import in a test while a broker
# thread compiles a selector; with everything compiled, imports compile nothing.
test: $(STAMP) $(STOMPJS)/node_modules/.installed net-stomp browser
	$(PY) -m compileall -q minibroker storage clients tests examples bench > /dev/null
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/compare.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data build *.egg-info $(STOMPJS)/node_modules
