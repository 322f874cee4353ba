#!/usr/bin/env bash
# `transformer params` equals the closed-form parameter count of the paper's
# architecture (sections 3.1-3.5), computed here independently from the
# config file's keys, for every Table 3 row in input/table3/:
#   attention sub-layer  d*(h*d_k + h*d_k + h*d_v) + h*d_v*d   (W^Q, W^K, W^V, W^O; no biases)
#   feed-forward         d*d_ff + d_ff + d_ff*d + d            (eq. 2, with biases)
#   layer norm           2*d                                   (gain and bias)
#   encoder layer        attention + ffn + 2 norms
#   decoder layer        2 attentions + ffn + 3 norms
#   total                N*(encoder + decoder) + V*d (shared embedding, section 3.4)
#                        + max_len*d when positions are learned (row E)
. "$(dirname "$0")/lib.sh"

closed_form() {   # closed_form FILE [key=value ...]: prints the count
    local f=$1; shift
    awk -F= -v overrides="$*" '
        function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
        BEGIN { positional = "sinusoid" }
        { sub(/#.*/, ""); if (NF < 2) next; k = trim($1); v = trim($2); cfg[k] = v }
        END {
            n = split(overrides, ov, " ")
            for (i = 1; i <= n; i++) { split(ov[i], kv, "="); cfg[kv[1]] = kv[2] }
            N = cfg["n_layers"]; d = cfg["d_model"]; ff = cfg["d_ff"]; h = cfg["n_heads"]
            dk = cfg["d_k"]; dv = cfg["d_v"]; V = cfg["vocab_size"]; L = cfg["max_len"]
            att = d * (2 * h * dk + h * dv) + h * dv * d
            ffn = d * ff + ff + ff * d + d
            ln = 2 * d
            enc = att + ffn + 2 * ln
            dec = 2 * att + ffn + 3 * ln
            total = N * (enc + dec) + V * d
            if (cfg["positional"] == "learned") total += L * d
            printf "%.0f\n", total
        }' "$f"
}

n=0
for f in "$TOP"/input/table3/*.cfg; do
    row=$(basename "$f" .cfg)
    out=$("$BIN" params --config "$f") || fail "$row: params exited $?"
    got=$(echo "$out" | awk '$1 == "params" { print $2 }')
    want=$(closed_form "$f")
    [ "$got" = "$want" ] || fail "$row: params says $got, closed form $want"
    echo "$out" | grep -q "shared_embedding" || fail "$row: no per-component breakdown"
    # vocab_size override on the command line, as in the README's example
    got2=$("$BIN" params --config "$f" vocab_size=32000 | awk '$1 == "params" { print $2 }')
    want2=$(closed_form "$f" vocab_size=32000)
    [ "$got2" = "$want2" ] || fail "$row: with vocab_size=32000: params says $got2, closed form $want2"
    printf '%-5s %12s  paper %sM\n' "$row" "$got" "$(awk -F= '$1 ~ /paper_params_m/ { gsub(/ /, "", $2); print $2 }' "$f")"
    n=$((n + 1))
done
[ "$n" -eq 20 ] || fail "expected 20 Table 3 configs (base A1-A4 B1-B2 C1-C7 D1-D4 E big), found $n"
# the base model by hand (N=6, d=512, d_ff=2048, h=8, d_k=d_v=64, V=37000)
got=$("$BIN" params --config "$TOP/input/table3/base.cfg" | awk '$1 == "params" { print $2 }')
[ "$got" = 63045632 ] || fail "base: $got, expected 63045632"
ok "params matches the closed form for all $n Table 3 configs"
