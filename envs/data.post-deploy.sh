#!/usr/bin/env bash
# Snakemake runs this inside the freshly created env, from the workflow's working
# directory (this checkout): install rankrepro itself; its dependencies come from the env file.
set -euo pipefail
python -m pip install --no-deps -e .
