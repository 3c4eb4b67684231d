# The two Quick start commands. Both run scripts/bootstrap.sh first, which is idempotent and cached.
.PHONY: demo test bootstrap lint

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/capstan demo

lint:
	.venv/bin/ruff check src tests bench
	.venv/bin/ruff format --check src tests bench
	.venv/bin/mypy
	.venv/bin/mypy tests
	.venv/bin/lint-imports

test: bootstrap lint
	.venv/bin/python -m pytest
