#!/usr/bin/env bash
# Import of Marian directories that transformers built and a user damaged
# (analysis/hf_import.py, issue 45, docs/hf-export.md): tests/hf_import_check.py
# saves a tiny random MarianMTModel with save_pretrained and imports damaged
# copies: stored positions that are not the sinusoids, vocab.json out of
# source.spm's order, empty/truncated/random/header-damaged safetensors, a
# missing shard, pytorch_model.bin only, --data-out without source.spm or
# unwritable are each exit 2, one line naming the file, nothing written;
# bf16/fp16 weights, sharded safetensors, stored sinusoids and
# normalize_before import to the parameters of the undamaged import.
# Needs .venv-hf (tests/install-deps.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$TOP"
PY=$TOP/.venv-hf/bin/python
[ -x "$PY" ] || skip "no .venv-hf (bash tests/install-deps.sh creates it)"
W=$(mktemp -d /tmp/test_hf_import.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
"$PY" tests/hf_import_check.py "$W" 2>"$W/check.err" || fail "hf_import_check (above; stderr: $(tail -3 "$W/check.err"))"
echo "ok: test_hf_import"
