#!/usr/bin/env bash
# The docs check (tests/docs_check.py, issue 46) on this tree, then once per
# rule on a copy with one planted defect, which it must name: a stale commit
# hash, a commit HEAD does not reach, a missing path, a path only this
# clone has (never committed), an unlisted and an unknown test, an
# undocumented and an unknown config key, a hook missing from testing.md's
# table.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
CHECK=$TOP/tests/docs_check.py

out=$(python3 "$CHECK") || { echo "$out"; fail "the docs cite what does not exist (lines above)"; }
ok "$(tail -n 1 <<< "$out")"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# plant NAME PATTERN FILE SCRIPT: in a copy of the tree (symbolic links,
# FILE a real copy), runs the shell SCRIPT in it with $F = FILE; the check
# must fail with a line matching PATTERN
plant() {
    local name=$1 pat=$2 file=$3 script=$4 root=$TMP/$1 out rc=0
    mkdir -p "$root"
    for e in README.md Makefile src cuda tests docs analysis jobs input; do
        cp -rs "$TOP/$e" "$root/$e"
    done
    if [ -e "$root/$file" ] || [ -L "$root/$file" ]; then
        rm "$root/$file" && cp "$TOP/$file" "$root/$file"
    fi
    (cd "$root" && F=$file bash -c "$script")
    out=$(python3 "$CHECK" --root "$root" --git "$TOP") || rc=$?
    [ "$rc" -eq 1 ] || fail "planted $name: the check exited $rc, expected 1: $out"
    grep -qE -- "$pat" <<< "$out" || fail "planted $name: no line matching '$pat' in: $out"
    ok "planted $name: $(grep -m1 -E -- "$pat" <<< "$out")"
}

# the rules that ask git hold only where the tree is its own checkout
# (docs_check.py own_checkout), not an exported tree inside another's
OWN=no
[ "$(git -C "$TOP" rev-parse --show-toplevel 2>/dev/null || true)" = "$(cd "$TOP" && pwd -P)" ] && OWN=yes
if [ $OWN = yes ] && [ "$(git -C "$TOP" rev-parse --is-shallow-repository 2>/dev/null || true)" = false ]; then
    plant hash 'docs/performance.md:[0-9]+: hash: commit 0badc0de' docs/performance.md \
        'echo "Measured with the code of commit 0badc0de." >> "$F"'
    # a commit this clone holds but HEAD does not reach (as a rebase leaves
    # behind), written to a scratch object store so the clone is untouched;
    # its 12-digit prefix must hold a letter and a digit to count as a hash
    OBJ=$(git -C "$TOP" rev-parse --path-format=absolute --git-common-dir)/objects
    mkdir -p "$TMP/objects"
    export GIT_OBJECT_DIRECTORY=$TMP/objects GIT_ALTERNATE_OBJECT_DIRECTORIES=$OBJ
    for i in 1 2 3 4 5 6 7 8; do
        ORPHAN=$(git -C "$TOP" -c user.name=planted -c user.email=planted@example.invalid \
            commit-tree -m "planted $i" "HEAD^{tree}" | cut -c1-12)
        [[ $ORPHAN =~ [a-f] && $ORPHAN =~ [0-9] ]] && break
    done
    plant unreachable "docs/performance.md:[0-9]+: hash: commit $ORPHAN is not in the history" \
        docs/performance.md "echo \"Measured with the code of commit $ORPHAN.\" >> \"\$F\""
    unset GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
else
    ok "planted hash: skipped, this clone has no history of its own"
fi
plant path 'docs/design.md:[0-9]+: path: src/no_such_file.c does not exist' docs/design.md \
    'echo "See src/no_such_file.c." >> "$F"'
if [ $OWN = yes ]; then
    plant untracked-path 'docs/design.md:[0-9]+: path: src/planted_untracked.c is not tracked by git' \
        docs/design.md 'touch src/planted_untracked.c && echo "See src/planted_untracked.c." >> "$F"'
else
    ok "planted untracked-path: skipped, this tree is not its own checkout"
fi
plant unlisted-test 'test: test_planted_new \(tests/test_planted_new.sh\) is not listed' tests/test_planted_new.sh \
    'echo "exit 0" > "$F"'
plant unknown-test 'docs/testing.md:[0-9]+: test: test_no_such is listed' docs/testing.md \
    'sed -i "s/| \`test_layers\` |/| \`test_layers\`, \`test_no_such\` |/" "$F"'
plant undocumented-key 'key: planted_key \(src/config.c\) is not in the Config keys table' src/config.c \
    'sed -i "s/^    K(seed, T_U64, 0, 0, SAID),/&\n    K(planted_key, T_INT, 0, 1, SAID),/" "$F"'
plant unknown-key 'docs/training.md:[0-9]+: key: no_such_key is not a key' docs/training.md \
    'sed -i "s/^| \`seed\`/| \`no_such_key\`, \`seed\`/" "$F"'
plant hook 'hook: TRANSFORMER_RELU_MASK \(read in cuda/device.cuh\) is not in the Test hooks table' docs/testing.md \
    'sed -i "/^| \`TRANSFORMER_RELU_MASK/d" "$F"'
plant new-hook 'hook: TRANSFORMER_PLANTED \(read in src/planted.c\)' src/planted.c \
    'echo "const char *planted(void) { return getenv(\"TRANSFORMER_PLANTED\"); }" > "$F"'
