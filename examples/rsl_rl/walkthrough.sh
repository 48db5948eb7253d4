#!/usr/bin/env bash
# From a trained run directory to a rehearsed package, as docs/from-training.md walks it:
# rsl_rl trains a toy H1 run for a few PPO iterations (make_run.py), one command builds the
# package with its contract (deploy.yaml) and the training armature (env.yaml), tdaot inspect
# shows the terms, tdaot rehearse runs it in MuJoCo on the H1's MJCF.
#
#   examples/rsl_rl/walkthrough.sh [H1_DIR] [OUT_DIR]     (from the repository root, after make cpp)
#
# Needs rsl-rl-lib (pip install 'tensordict-aot[rsl-rl]' rsl-rl-lib==5.5.1) and, for the
# rehearsal, tdaot-rehearse (make cpp, where CMake finds MuJoCo). The toy policy is not trained
# to walk: the rehearsal runs, and reports the fall.
set -euo pipefail
H1=${1:-../shared/robots/unitree_h1}
OUT=${2:-dist/rsl_rl}
PY=${PY:-.venv/bin/python}
TDAOT=${TDAOT:-.venv/bin/tdaot}
mkdir -p "$OUT"
"$PY" examples/rsl_rl/make_run.py "$OUT/run" --mjcf "$H1/scene.xml"
"$TDAOT" build --rsl-rl "$OUT/run" --mjcf "$H1/scene.xml" -o "$OUT/h1_rsl_rl.pt2"
"$TDAOT" inspect "$OUT/h1_rsl_rl.pt2"
"$TDAOT" rehearse "$OUT/h1_rsl_rl.pt2" --mjcf "$H1/scene.xml" --command 0.5,0,0 --seconds 5 \
	--trajectory "$OUT/h1_rsl_rl.csv"
