# The two commands of the README. Both bootstrap the clone first (idempotent, fast when done).
.PHONY: demo test bootstrap constraints docs

demo:
	bash scripts/bootstrap.sh
	.venv/bin/primus demo

test:
	bash scripts/test.sh

bootstrap:
	bash scripts/bootstrap.sh

# Re-pin the dependency set after changing pyproject.toml's dependencies: runtime pins in
# constraints.txt (what a deployment installs with), development tools in constraints-dev.txt.
constraints:
	.venv/bin/python -m pip install --quiet --no-deps -e .
	.venv/bin/python scripts/constraints.py

# Regenerate docs/airflow.md's parameter reference from the operators', sensors', triggers' and hook's
# :param lines (tests/test_docs_params.py fails while it is stale).
docs:
	python3 scripts/airflow_params.py
