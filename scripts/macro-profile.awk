# Sums the TC_PROFILE lines the macro writes (tc-core/src/profile.rs), one
# per tensor fn: `label phase=µs/count ...`. Prints each phase's mean time
# and calls per line. usage: tail -n 50 "$TC_PROFILE" | awk -f scripts/macro-profile.awk
{
    n++
    for (i = 2; i <= NF; i++) {
        split($i, a, "="); split(a[2], b, "/")
        us[a[1]] += b[1]; c[a[1]] += b[2]
        if (!(a[1] in seen)) { seen[a[1]] = 1; order[++k] = a[1] }
    }
}
END {
    printf "%d fns\n", n
    for (j = 1; j <= k; j++) {
        p = order[j]
        printf "%-18s %8.3f ms/fn  %6.2f calls/fn\n", p, us[p] / n / 1000, c[p] / n
    }
}
