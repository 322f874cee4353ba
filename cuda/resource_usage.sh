#!/usr/bin/env bash
# Per-kernel resources from nvcc's `-Xptxas -v` output, and the check the
# build runs against the committed table cuda/resource-usage.txt.
#   resource_usage.sh table PTXAS_LOG          -> prints the table
#   resource_usage.sh check PTXAS_LOG COMMITTED -> exit 1 on a spill, local
#       memory, a kernel missing from COMMITTED, more than 25% (+4) more
#       registers, or more than 1 KiB more static shared memory
# Columns: arch kernel registers static_smem_bytes stack_bytes spill_stores spill_loads
set -euo pipefail
table() {
    perl -ne '
        if (/Compiling entry function .([^\x27]+). for .(sm_\w+)/) { ($fn, $arch) = ($1, $2); ($st, $ss, $sl) = (0, 0, 0) }
        if (defined $fn && /(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads/) { ($st, $ss, $sl) = ($1, $2, $3) }
        if (defined $fn && /Used (\d+) registers/) {
            $r = $1; $sm = /(\d+) bytes smem/ ? $1 : 0;
            print "$arch $fn $r $sm $st $ss $sl\n"; undef $fn;
        }' "$1" | while read -r arch fn regs smem stack sst sld; do
        echo "$arch $(echo "$fn" | c++filt | sed 's/(.*//; s/^void //') $regs $smem $stack $sst $sld"
    done | sort
}
case "$1" in
table) echo "# arch kernel registers static_smem stack spill_stores spill_loads (nvcc -Xptxas -v)"; table "$2" ;;
check)
    new=$(table "$2")
    committed=$3
    bad=0
    while read -r arch k regs smem stack sst sld; do
        # (a build of PTX alone runs no ptxas: nothing to check)
        [ -n "$k" ] || continue
        if [ "$sst" != 0 ] || [ "$sld" != 0 ] || [ "$stack" != 0 ]; then
            echo "error: cuda: kernel $k ($arch) spills or uses local memory: stack $stack, spill stores $sst, loads $sld" >&2; bad=1
        fi
        if ! grep -q "^$arch " "$committed"; then
            echo "note: cuda: no $arch figures in $committed to compare $k against" >&2; continue
        fi
        old=$(awk -v a="$arch" -v k="$k" '$1 == a && $2 == k { print $3, $4 }' "$committed")
        if [ -z "$old" ]; then
            echo "error: cuda: kernel $k ($arch) is not in $committed (record it with 'make cuda-resources')" >&2; bad=1; continue
        fi
        set -- $old
        if [ "$regs" -gt $(( $1 * 5 / 4 + 4 )) ]; then
            echo "error: cuda: kernel $k ($arch) uses $regs registers, $1 recorded in $committed" >&2; bad=1
        fi
        if [ "$smem" -gt $(( $2 + 1024 )) ]; then
            echo "error: cuda: kernel $k ($arch) uses $smem bytes of static shared memory, $2 recorded" >&2; bad=1
        fi
    done <<< "$new"
    exit $bad ;;
*) echo "usage: $0 table|check PTXAS_LOG [COMMITTED]" >&2; exit 2 ;;
esac
