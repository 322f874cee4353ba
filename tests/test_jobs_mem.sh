#!/usr/bin/env bash
# MEM_PER_NODE=auto (jobs/submit.sh mem_request) for a dataset file: the
# node holds a mapped training split once (docs/dataset.md), so 8 ranks
# per node ask for the file once plus a fifth of it per rank; a file of
# the older layout (ids deflated: not mappable, h5dump says CHUNKED) is
# read by every rank: twice its size per rank.  Checked with a stub sbatch
# on a 600000-pair generated file (83 MB) and the same ids in the old layout.
set -u
. "$(dirname "$0")/lib.sh"
GEN=$TOP/bin/tests/gen_corpus
[ -x "$GEN" ] || fail "$GEN: not built (make tests)"
command -v h5dump >/dev/null || skip "no h5dump"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$GEN" ids "$W/new.h5" 600000 1000 1 || fail "gen_corpus"
# the old layout: h5repack to chunked + deflate ids
h5repack -l /splits/train/src_ids,/splits/train/tgt_ids:CHUNK=65536 -f /splits/train/src_ids,/splits/train/tgt_ids:GZIP=1 \
    "$W/new.h5" "$W/old.h5" || fail "h5repack"
mkdir "$W/bin"; printf '#!/bin/sh\nexit 0\n' >"$W/bin/sbatch"; chmod +x "$W/bin/sbatch"
printf 'data = %s\nvocab_size = 1000\nd_model = 32\nd_ff = 64\nn_heads = 2\nd_k = 16\nd_v = 16\nn_layers = 1\n' "$W/new.h5" >"$W/c.cfg"
mem() { PATH=$W/bin:$PATH GPUS_PER_NODE=8 MEM_PER_NODE=auto bash -c '. "$1/jobs/submit.sh"; GPUS_PER_NODE=8; MEM_PER_NODE=auto; mem_request "$2" "$3"' _ "$TOP" "$W/c.cfg" "$1" | tr -dc 0-9; }
base=$(mem data=synthetic) new=$(mem data="$W/new.h5") old=$(mem data="$W/old.h5")
bnew=$(stat -c %s "$W/new.h5") bold=$(stat -c %s "$W/old.h5")
echo "--mem MB: no file $base, mapped $((bnew >> 20)) MB file $new, old-layout $((bold >> 20)) MB file $old"
# (file + 8 x file/5) x 1.25 = 3.25 x file; old: 8 x 2 x file x 1.25 = 20 x file
near() { awk -v got="$1" -v want="$2" 'BEGIN { d = got - want; exit !(d <= 2 && d >= -2) }'; }
near $((new - base)) "$(awk -v b="$bnew" 'BEGIN { print b * 3.25 / 1048576 }')" ||
    fail "mapped file: --mem ${new}M, ${base}M + 3.25 x the file expected"
near $((old - base)) "$(awk -v b="$bold" 'BEGIN { print b * 20 / 1048576 }')" ||
    fail "old-layout file: --mem ${old}M, ${base}M + 20 x the file expected"
ok "MEM_PER_NODE=auto, 8 ranks: +$((new - base)) MB for the mapped $((bnew >> 20)) MB file (once per node), +$((old - base)) MB for the old-layout $((bold >> 20)) MB one (per rank)"
