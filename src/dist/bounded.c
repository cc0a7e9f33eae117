/* Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, 2018) as a policy over any preference list. */
#include "config.h"

#include <math.h>

#include "dist/dist.h"

/*
 * Let L be the total of the in-flight loads over all nservers servers
 * before this request, and c = max(factor, 1). The cap is
 *
 *     cap = ceil(c * (L + 1) / nservers)
 *
 * i.e. c times the mean load counting the request being placed. The request
 * goes to the first server of pref whose load is below cap, so:
 *
 *   GUARANTEE: the chosen server's load after the placement is at most cap,
 *   i.e. at most ceil(c * mean) where mean is taken right after the
 *   placement, provided pref lists every server (or any server with room).
 *
 * Why someone always has room when pref covers every server: if every
 * server had load >= cap then L >= nservers * cap >= c * (L + 1) >= L + 1,
 * a contradiction. This is why c is clamped to 1: below 1 the bound cannot
 * hold. With no completions loads only grow, the cap never falls, so every
 * server stays <= ceil(c * mean) at all times; with completions the mean can
 * fall under a server placed earlier, and the guarantee is the one above (at
 * each placement), as in the paper.
 *
 * When pref is shorter than the server list and none of it has room, the
 * owner pref[0] is returned: callers wanting the hard bound pass the full
 * preference list (a longer list only costs when the owner is full).
 *
 * Cost: one load() per server to sum L, plus one per candidate examined.
 */
uint32_t dist_bounded_pick(const uint32_t *pref, uint32_t npref, dist_load_fn load, void *ctx,
                           uint32_t nservers, double factor)
{
    if (npref == 0)
        return 0;
    if (nservers == 0)
        return pref[0];
    if (!(factor >= 1.0))   /* also catches NaN */
        factor = 1.0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < nservers; i++)
        total += load(ctx, i);
    uint64_t cap;
    if (factor == 1.0) {
        cap = (total + nservers) / nservers;    /* exact ceil((L + 1) / n) */
    } else {
        double capf = ceil(factor * (double)(total + 1) / (double)nservers);
        cap = capf >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)capf;
    }
    for (uint32_t i = 0; i < npref; i++)
        if ((uint64_t)load(ctx, pref[i]) < cap)
            return pref[i];
    return pref[0];
}
