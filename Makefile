# TrainHub: `make run` brings it all up, `make test` runs the whole suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test test-postgres test-fast bench browsers system-packages clean

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required (set PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(DEV_STAMP): requirements-dev.txt $(STAMP)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

run: $(STAMP)
	$(PY) manage.py up

# What the tests need from the system: Chromium (browser tests), bubblewrap (the job sandbox),
# Slurm and munge (a real two-node cluster for the Slurm backend's tests, tests/slurm_cluster.py).
SYSTEM_PACKAGES := chromium chromium-driver bubblewrap slurm-wlm slurmdbd munge
SYSTEM_COMMANDS := chromium bwrap sbatch slurmctld slurmd slurmdbd munged

system-packages:
	@( for c in $(SYSTEM_COMMANDS); do command -v $$c >/dev/null || exit 1; done ) || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; } || \
		if [ "$$CI" = true ]; then echo "CI=true: system packages could not be installed (apt-get install $(SYSTEM_PACKAGES)); the browser, sandbox and Slurm tests are required"; exit 1; \
		else echo "== $(SYSTEM_PACKAGES) could not be installed: browser, sandbox and Slurm tests will be SKIPPED"; fi

browsers: system-packages

TEST_PG ?= $(or $(TRAINHUB_TEST_POSTGRES_URL),postgres://postgres@127.0.0.1:5432/test)

# The two passes run side by side: most of a pass is spent waiting on real processes (workers starting,
# leases running out, Slurm, torchft), not on the CPU. Each pass has its own Redis, database, run
# directories and Slurm cluster (free ports), and tests look for their own jobs' processes by run
# directory, so neither sees the other's. The PostgreSQL pass's output is shown once both have ended.
# The SQLite pass itself runs in two pytest-xdist workers, which are two such passes over halves of it.
# `worksteal`, not `loadfile`: the schema fuzz test's 15 items share one node id under pytest 9.2
# (schemathesis), and loadfile schedules by node id, so it ran one of them and dropped 14 unreported.
test: $(DEV_STAMP) system-packages
	@mkdir -p var; \
	$(MAKE) --no-print-directory test-postgres >var/test-postgres.log 2>&1 & pg=$$!; \
	$(PY) -m pytest -n 2 --dist worksteal; sqlite=$$?; \
	wait $$pg; postgres=$$?; \
	echo "== the PostgreSQL pass, run beside the SQLite pass (var/test-postgres.log):"; cat var/test-postgres.log; \
	echo "== SQLite pass: exit $$sqlite; PostgreSQL pass: exit $$postgres"; \
	[ $$sqlite -eq 0 ] && [ $$postgres -eq 0 ]

# The database-facing tests again on PostgreSQL. Run once, on SQLite: the runner's tests and those
# marked no_db (they use no database, or `make run`'s own) or db_agnostic (an engine's behaviour through
# a job: Slurm, torchft sites, real training, a timeout, the watchdog, a rank's death, bubblewrap, the run
# directory cap; their database use is any job's), the docs' examples (tests/docs) and the browser tests
# (what they add over the HTTP tests is the browser, not the database). The claim, lease, fencing, outage
# and Slurm adoption tests (tests/runs, tests/workers, tests/faults' outage tests, tests/slurm/test_restart.py)
# do run on PostgreSQL.
test-postgres: $(DEV_STAMP)
	@if $(PY) -c "import psycopg,sys; psycopg.connect(sys.argv[1], connect_timeout=3).close()" "$(TEST_PG)" 2>/dev/null; then \
		echo "== PostgreSQL: $(TEST_PG)"; \
		DATABASE_URL="$(TEST_PG)" $(PY) -m pytest --ignore=tests/runner --ignore=tests/docs -m "not browser and not no_db and not db_agnostic"; \
	elif [ "$$CI" = true ]; then echo "CI=true: PostgreSQL at $(TEST_PG) does not answer; the PostgreSQL pass is required (set TRAINHUB_TEST_POSTGRES_URL)"; exit 1; \
	else echo "== PostgreSQL at $(TEST_PG) does not answer: PostgreSQL run SKIPPED (set TRAINHUB_TEST_POSTGRES_URL)"; fi

test-fast: $(DEV_STAMP)
	$(PY) -m pytest -m "not slow"

bench: $(DEV_STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var
