#!/usr/bin/env bash
# The mutation check (issue 25): plant each known protocol/committer bug in a copy of the source and show
# which tests catch it (tests/mutation/). Not part of the suite (it runs the model test once per mutant,
# ~30-60 min on 2 cores). Arguments go to the runner, e.g. `scripts/mutate.sh --only uuid-pin-dropped`.
# `--generated` judges mechanically generated mutants instead (tests/mutation/generated.py), e.g.
# `scripts/mutate.sh --generated --sample 18 --seed 34 --jobs 1` (docs/testing-mutation.md).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
"$REPO_ROOT/scripts/bootstrap.sh"
exec "$VENV/bin/python" -m tests.mutation.run "$@"
