/* examples/lloyd_max.c - derives kvq.h's Lloyd-Max table (Sec. 4.1), the
   grid TurboQuant (arXiv 2504.19874, Sec. 3.1) codes each rotated
   coordinate on, and checks the table kvq.h ships against it.

   What is computed. The scalar quantizer with L = 2^B levels that
   minimizes E (Z - q(Z))^2 for Z ~ N(0, 1): Lloyd's two conditions,
     thresholds  t_k = (c_k-1 + c_k) / 2                (nearest centroid)
     centroids   c_k = E[Z | t_k < Z < t_k+1]
                     = (phi(t_k) - phi(t_k+1)) / (Phi(t_k+1) - Phi(t_k)),
   phi the N(0, 1) density, Phi its distribution (0.5 erf(x / sqrt 2)
   differences), t_0 = -inf, t_L = +inf. Lloyd's iteration alternates the
   two from evenly spaced centroids on [-2.5, 2.5] until no centroid moves
   by more than 1e-15, in double precision. The mean squared error per
   coordinate is then, cell by cell, from int x phi = phi(a) - phi(b) and
   int x^2 phi = P + a phi(a) - b phi(b):
       MSE = sum_k  P_k (1 + c_k^2) + t_k phi(t_k) - t_k+1 phi(t_k+1) - 2 c_k M1_k.

   Precision. libm's erf and exp are within an ulp or two of double, so
   each cell mean is good to about 1e-15; the iteration stops when its
   step is below 1e-15, and with B = 4's contraction (about 0.96 per
   step) that leaves the centroids within about 1e-14 of Lloyd's fixed
   point (the residual printed is the largest |c_k - E[Z | cell k]|). The
   9 significant digits printed, and the float table (24 bits, about 7.2
   digits), are therefore exact.

   Check. kvq.h's table is these values rounded to float: each entry must
   be within 1 float ulp of the double centroid (it is the nearest float
   unless the 9-digit decimal in kvq.h rounded the other way). Exits 1 if
   any entry is further, or if the MSE of kvq.h's float table differs from
   the double optimum's by more than 1e-9.

   Run: ./build/examples/lloyd_max  (milliseconds; no arguments)           */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "common.h"

#define LM_PI 3.14159265358979323846

static double lm_phi(double x) { return isinf(x) ? 0.0 : exp(-0.5 * x * x) / sqrt(2.0 * LM_PI); }
static double lm_xphi(double x) { return isinf(x) ? 0.0 : x * lm_phi(x); }
static double lm_mass(double a, double b) { return 0.5 * (erf(b / sqrt(2.0)) - erf(a / sqrt(2.0))); }

/* Thresholds t[0..L] of centroids c (midpoints; t[0] = -inf, t[L] = inf). */
static void lm_thresholds(int L, const double *c, double *t)
{
    int k;
    t[0] = -INFINITY;
    t[L] = INFINITY;
    for (k = 1; k < L; k++) t[k] = (c[k - 1] + c[k]) / 2;
}

/* Lloyd's iteration; returns the iterations taken, *last the last move.   */
static int lm_lloyd(int L, double *c, double *last)
{
    double t[17];
    int k, it;
    for (k = 0; k < L; k++) c[k] = -2.5 + 5.0 * (k + 0.5) / L;
    for (it = 1; it <= 1000000; it++) {
        double moved = 0;
        lm_thresholds(L, c, t);
        for (k = 0; k < L; k++) {
            double n = (lm_phi(t[k]) - lm_phi(t[k + 1])) / lm_mass(t[k], t[k + 1]);
            moved = fabs(n - c[k]) > moved ? fabs(n - c[k]) : moved;
            c[k] = n;
        }
        *last = moved;
        if (moved <= 1e-15) break;
    }
    return it;
}

/* E (Z - q(Z))^2 with centroids c and midpoint thresholds.                */
static double lm_mse(int L, const double *c)
{
    double t[17], e = 0;
    int k;
    lm_thresholds(L, c, t);
    for (k = 0; k < L; k++) {
        double P = lm_mass(t[k], t[k + 1]), M1 = lm_phi(t[k]) - lm_phi(t[k + 1]);
        e += P * (1 + c[k] * c[k]) + lm_xphi(t[k]) - lm_xphi(t[k + 1]) - 2 * c[k] * M1;
    }
    return e;
}

/* The largest |c_k - E[Z | cell k]| of c: how far from Lloyd's fixed point. */
static double lm_residual(int L, const double *c)
{
    double t[17], r = 0;
    int k;
    lm_thresholds(L, c, t);
    for (k = 0; k < L; k++) {
        double m = (lm_phi(t[k]) - lm_phi(t[k + 1])) / lm_mass(t[k], t[k + 1]);
        r = fabs(m - c[k]) > r ? fabs(m - c[k]) : r;
    }
    return r;
}

int main(void)
{
    int B, k;
    printf("lloyd_max: the Lloyd-Max grid of N(0, 1), in double (kvq.h Sec. 4.1, TurboQuant Sec. 3.1)\n");
    for (B = 1; B <= 4; B++) {
        const int L = 1 << B;
        const float *table = kvq_lloyd_max_centroids(B);
        double c[16], last, ck[16];
        int iters = lm_lloyd(L, c, &last), off = 0;
        printf("\nB = %d: %d levels, %d iterations (last move %.1e, residual %.1e)\n", B, L, iters,
               last, lm_residual(L, c));
        printf("   centroids (the negative half mirrors):");
        for (k = L / 2; k < L; k++) printf(" %.9g", c[k]);
        printf("\n   MSE per coordinate: %.6g\n", lm_mse(L, c));
        if (!table) {
            printf("   kvq.h has no table at B = %d (TurboQuant's presets use B = 2, 3, 4)\n", B);
            continue;
        }
        printf("   kvq.h's initializer: { ");
        for (k = 0; k < L; k++) printf("%.9gf%s", c[k], k + 1 < L ? ", " : " };\n");
        for (k = 0; k < L; k++) {
            float want = (float)c[k];
            double ulp = (double)nextafterf(fabsf(want), INFINITY) - fabsf(want);
            ck[k] = table[k];
            off += fabs((double)table[k] - c[k]) > ulp;
        }
        ex_check(off == 0, "kvq_lloyd_max_centroids(%d): all %d entries within 1 float ulp of the "
                 "double centroids", B, L);
        ex_check(fabs(lm_mse(L, ck) - lm_mse(L, c)) <= 1e-9, "MSE of kvq.h's float table %.9g, of the "
                 "double optimum %.9g (within 1e-9)", lm_mse(L, ck), lm_mse(L, c));
    }
    return ex_finish("lloyd_max");
}
