# The two commands of the README. Both bootstrap the clone first (idempotent, fast when done).
.PHONY: demo test bootstrap constraints docs

demo:
	bash scripts/bootstrap.sh
	.venv/bin/primus demo

test:
	bash scripts/test.sh

bootstrap:
	bash scripts/bootstrap.sh

# Re-pin the dependency set after changing pyproject.toml's dependencies.
constraints:
	.venv/bin/python -m pip freeze --exclude-editable | grep -v '^airflow-provider-primus' > constraints.txt

# Regenerate docs/airflow.md's parameter reference from the operators', sensors', triggers' and hook's
# :param lines (tests/test_docs_params.py fails while it is stale).
docs:
	python3 scripts/airflow_params.py
