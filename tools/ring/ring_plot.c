/* Plots for ringleader-ring: self-contained SVG documents of a pool's balance and of what a change moves. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring_plot.h"

/*
 * Written by hand: an SVG is a few kinds of element, and a library would add a dependency
 * for less than this file. Sizes are in pixels at 12 px text, whose glyphs average about
 * 7 px: label columns are sized from the longest label with that estimate, capped.
 */

#define PLOT_MARGIN     16
#define PLOT_CHAR_W     7.0
#define PLOT_LABEL_MAX  260
#define PLOT_BAR_W      520
#define PLOT_ROW_H      24
#define PLOT_FONT       "font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\""

#define COLOR_TEXT  "#1d2330"
#define COLOR_DIM   "#6b7280"
#define COLOR_GRID  "#e3e6eb"
#define COLOR_KEYS  "#3b6fd8"
#define COLOR_OVER  "#d9822b"
#define COLOR_SAMPLE "#9db8ee"
#define COLOR_FAIR  "#111111"
#define COLOR_STAY  "#d5d9e0"

/* Text as XML character data: markup characters escaped, control bytes shown as '?'. */
static void plot_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(c < 0x20 || c == 0x7f ? '?' : c, f); break;
        }
    }
}

static double plot_label_width(const char *const *labels, uint32_t n, const char *suffix)
{
    size_t longest = 6;
    for (uint32_t i = 0; i < n; i++) {
        size_t l = strlen(labels[i]) + (suffix ? strlen(suffix) : 0);
        if (l > longest)
            longest = l;
    }
    double w = (double)longest * PLOT_CHAR_W + 16;
    return w > PLOT_LABEL_MAX ? PLOT_LABEL_MAX : w;
}

/* A step of 1, 2 or 5 x 10^k giving at most 6 ticks up to max. */
static double plot_step(double max)
{
    double raw = max / 5, p = pow(10, floor(log10(raw > 0 ? raw : 1e-9)));
    double m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static void plot_head(FILE *f, double w, double h, const char *title)
{
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" " PLOT_FONT " font-size=\"12\">\n<title>",
            w, h, w, h);
    plot_text(f, title);
    fprintf(f, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
}

/* ---------------------------------------------------------------- balance */

static double balance_label_w(const struct plot_balance *p)
{
    double w = 80;
    for (uint32_t i = 0; i < p->nservers; i++) {
        double l = (double)strlen(p->servers[i].label) * PLOT_CHAR_W + 16;
        if (l > w)
            w = l;
    }
    return w > PLOT_LABEL_MAX ? PLOT_LABEL_MAX : w;
}

static double balance_height(const struct plot_balance *p)
{
    return 100 + (double)p->nservers * PLOT_ROW_H + 34;
}

static void balance_panel(FILE *f, const struct plot_balance *p, double y, double lw)
{
    double x0 = PLOT_MARGIN + lw, top = y + 92, max = 0;

    for (uint32_t i = 0; i < p->nservers; i++) {
        const struct plot_server *s = &p->servers[i];
        max = fmax(max, fmax(s->fair, fmax(s->keyspace, s->sample)));
    }
    max = max > 0 ? max * 1.08 : 1;
    double step = plot_step(max), scale = PLOT_BAR_W / max;

    fprintf(f, "<g>\n<text x=\"%d\" y=\"%.0f\" font-size=\"15\" font-weight=\"bold\" fill=\""
               COLOR_TEXT "\">pool ", PLOT_MARGIN, y + 22);
    plot_text(f, p->pool);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"%.0f\" fill=\"" COLOR_DIM "\">", PLOT_MARGIN, y + 42);
    plot_text(f, p->distribution);
    fputs(", hash ", f);
    plot_text(f, p->hash);
    fprintf(f, ", %u server%s, checksum %s; keyspace max/mean %.4f, sample keys max/mean %.4f "
               "(relative to the fair shares)</text>\n",
            p->nservers, p->nservers == 1 ? "" : "s", p->checksum, p->keyspace_max_over_mean,
            p->sample_max_over_mean);
    /* legend: four items one after the other */
    double ly = y + 62, lx = PLOT_MARGIN;
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"10\" fill=\"" COLOR_KEYS "\"/>"
               "<text x=\"%.0f\" y=\"%.0f\" fill=\"" COLOR_TEXT "\">share of the keyspace%s</text>\n",
            lx, ly - 9, lx + 20, ly, p->keyspace_exact ? "" : " (estimated)");
    lx += 20 + PLOT_CHAR_W * (p->keyspace_exact ? 21 : 33) + 24;
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"10\" fill=\"" COLOR_OVER "\"/>"
               "<text x=\"%.0f\" y=\"%.0f\" fill=\"" COLOR_TEXT "\">more than 10%% over its "
               "fair share</text>\n", lx, ly - 9, lx + 20, ly);
    lx += 20 + PLOT_CHAR_W * 32 + 24;
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"5\" fill=\"" COLOR_SAMPLE "\"/>"
               "<text x=\"%.0f\" y=\"%.0f\" fill=\"" COLOR_TEXT "\">share of the ",
            lx, ly - 6, lx + 20, ly);
    plot_text(f, p->samples_what);
    lx += 20 + PLOT_CHAR_W * (13 + (double)strlen(p->samples_what)) + 24;
    fprintf(f, "</text>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"2\" height=\"12\" fill=\"" COLOR_FAIR
               "\"/><text x=\"%.0f\" y=\"%.0f\" fill=\"" COLOR_TEXT "\">fair share</text>\n",
            lx, ly - 10, lx + 8, ly);
    /* axis and grid */
    for (double t = 0; t <= max + 1e-12; t += step) {
        double x = x0 + t * scale;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"" COLOR_GRID
                   "\"/><text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"" COLOR_DIM
                   "\" font-size=\"11\">%.*f%%</text>\n",
                x, top - 4, x, top + (double)p->nservers * PLOT_ROW_H, x, top - 8,
                step * 100 < 1 ? 2 : step * 100 < 10 ? 1 : 0, t * 100);
    }
    for (uint32_t i = 0; i < p->nservers; i++) {
        const struct plot_server *s = &p->servers[i];
        double ry = top + (double)i * PLOT_ROW_H;
        int over = s->fair > 0 && s->keyspace > s->fair * 1.1;
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\" fill=\"" COLOR_TEXT "\">",
                x0 - 8, ry + 15);
        plot_text(f, s->label);
        fprintf(f, "</text>\n<rect x=\"%.0f\" y=\"%.1f\" width=\"%.2f\" height=\"10\" fill=\"%s\"/>"
                   "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.2f\" height=\"5\" fill=\"" COLOR_SAMPLE "\"/>"
                   "<rect x=\"%.2f\" y=\"%.1f\" width=\"2\" height=\"20\" fill=\"" COLOR_FAIR "\"/>\n",
                x0, ry + 3, s->keyspace * scale, over ? COLOR_OVER : COLOR_KEYS, x0, ry + 14,
                s->sample * scale, x0 + s->fair * scale - 1, ry + 1);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"" COLOR_TEXT "\">%.2f%%"
                   "<tspan fill=\"" COLOR_DIM "\">, keys %.2f%%, fair %.2f%%, weight %u</tspan></text>\n",
                x0 + PLOT_BAR_W + 12, ry + 15, 100 * s->keyspace, 100 * s->sample, 100 * s->fair,
                s->weight);
    }
    fprintf(f, "</g>\n");
}

int plot_balance_svg(FILE *f, const struct plot_balance *pools, uint32_t npools)
{
    double lw = 80, h = 0, legend = 0;
    for (uint32_t i = 0; i < npools; i++) {
        lw = fmax(lw, balance_label_w(&pools[i]));
        h += balance_height(&pools[i]);
        legend = fmax(legend, PLOT_MARGIN + 620 + PLOT_CHAR_W * (double)strlen(pools[i].samples_what));
        /* the second title line: distribution, hash, servers, checksum, spreads */
        legend = fmax(legend, PLOT_MARGIN * 2 + 6.6 * (double)(140 + strlen(pools[i].distribution) +
                                                                 strlen(pools[i].hash)));
    }
    double width = fmax(legend, PLOT_MARGIN + lw + PLOT_BAR_W + 12 + 300 + PLOT_MARGIN);
    plot_head(f, width, h + PLOT_MARGIN, npools == 1 ? pools[0].pool : "ringleader-ring --balance");
    double y = 0;
    for (uint32_t i = 0; i < npools; i++) {
        balance_panel(f, &pools[i], y, lw);
        y += balance_height(&pools[i]);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

/* ---------------------------------------------------------------- diff */

struct diff_geom {
    double lw, top_h, cell, x0, y0, width, height;
};

static void diff_geometry(const struct plot_diff *d, struct diff_geom *g)
{
    uint32_t n = d->nold > d->nnew ? d->nold : d->nnew;
    g->lw = plot_label_width(d->old_labels, d->nold, " (removed)");
    double cw = plot_label_width(d->new_labels, d->nnew, " (new)");
    g->cell = n ? fmin(40, fmax(14, 560.0 / n)) : 40;
    g->top_h = cw * 0.72 + 12;                   /* column labels at -45 degrees */
    g->x0 = PLOT_MARGIN + g->lw;
    g->y0 = 100 + g->top_h;
    g->width = g->x0 + g->cell * d->nnew + 150 + PLOT_MARGIN + cw * 0.72;
    g->height = g->y0 + g->cell * d->nold + 44;
    if (d->nold == 0 || d->nnew == 0) {
        g->width = 760;
        g->height = 90;
    }
}

/* White through orange to dark red: x in 0..1. */
static void diff_color(double x, char out[8])
{
    static const double stops[][3] = { { 255, 245, 235 }, { 253, 174, 107 }, { 217, 72, 1 },
                                       { 127, 39, 4 } };
    x = x < 0 ? 0 : x > 1 ? 1 : x;
    double t = x * 3;
    int k = t >= 3 ? 2 : (int)t;
    double u = t - k;
    int c[3];
    for (int i = 0; i < 3; i++)
        c[i] = (int)lround(stops[k][i] + (stops[k + 1][i] - stops[k][i]) * u);
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
}

static void diff_panel(FILE *f, const struct plot_diff *d, double y, const struct diff_geom *g)
{
    fprintf(f, "<g>\n<text x=\"%d\" y=\"%.0f\" font-size=\"15\" font-weight=\"bold\" fill=\""
               COLOR_TEXT "\">pool ", PLOT_MARGIN, y + 22);
    plot_text(f, d->pool);
    if (d->nold == 0 || d->nnew == 0) {
        fprintf(f, " (%s)</text>\n<text x=\"%d\" y=\"%.0f\" fill=\"" COLOR_DIM "\">only in the "
                   "%s file: every key of it %s (moved 100%%, floor 100%%)</text>\n</g>\n",
                d->nold == 0 ? "new" : "removed", PLOT_MARGIN, y + 44,
                d->nold == 0 ? "new" : "old", d->nold == 0 ? "is new" : "goes");
        return;
    }
    fprintf(f, ": epoch %llu &#8594; %llu, checksum %s &#8594; %s</text>\n",
            (unsigned long long)d->old_epoch, (unsigned long long)d->new_epoch, d->old_checksum,
            d->new_checksum);
    uint64_t moved_samples = 0;
    for (uint32_t k = 0; k < d->nflows; k++)
        moved_samples += d->flows[k].count;
    if (d->samples == 0) {          /* the same ring: nothing to sample */
        fprintf(f, "<text x=\"%d\" y=\"%.0f\" fill=\"" COLOR_TEXT "\">the ring is unchanged: "
                   "no key moves</text>\n", PLOT_MARGIN, y + 42);
    } else {
    fprintf(f, "<text x=\"%d\" y=\"%.0f\" fill=\"" COLOR_TEXT "\">moved %.4f%% of the keyspace "
               "(%s), floor %.4f%%", PLOT_MARGIN, y + 42, 100 * d->moved,
            d->moved_exact ? "exact" : "estimated", 100 * d->floor);
    if (d->floor > 0)
        fprintf(f, " (%.2f&#215; the floor)", d->moved / d->floor);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"%.0f\" fill=\"" COLOR_DIM "\">a cell: the %% "
               "of the ", PLOT_MARGIN, y + 60);
    plot_text(f, d->samples_what);
    fprintf(f, " whose owner goes from its row's server to its column's (%.4f%% in all); grey: "
               "kept by a server in both</text>\n", 100.0 * (double)moved_samples / (double)d->samples);
    }

    double max = 0;
    for (uint32_t k = 0; k < d->nflows; k++)
        max = fmax(max, (double)d->flows[k].count);
    double x0 = g->x0, y0 = y + g->y0, c = g->cell;
    /* column labels, with "(new)" for a server only the new ring has */
    for (uint32_t j = 0; j < d->nnew; j++) {
        int fresh = 1;
        for (uint32_t i = 0; i < d->nold && fresh; i++)
            fresh = d->kept[i] != (int64_t)j;
        double cx = x0 + c * j + c / 2;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(-45 %.1f %.1f)\" fill=\"%s\">",
                cx, y0 - 6, cx, y0 - 6, fresh ? COLOR_OVER : COLOR_TEXT);
        plot_text(f, d->new_labels[j]);
        fprintf(f, "%s</text>\n", fresh ? " (new)" : "");
    }
    char color[8];
    for (uint32_t i = 0; i < d->nold; i++) {
        double ry = y0 + c * i;
        uint64_t out = 0;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" fill=\"%s\">", x0 - 8,
                ry + c / 2 + 4, d->kept[i] < 0 ? COLOR_OVER : COLOR_TEXT);
        plot_text(f, d->old_labels[i]);
        fprintf(f, "%s</text>\n", d->kept[i] < 0 ? " (removed)" : "");
        for (uint32_t j = 0; j < d->nnew; j++)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                       "stroke=\"" COLOR_GRID "\"/>\n", x0 + c * j, ry, c, c,
                    d->kept[i] == (int64_t)j ? COLOR_STAY : "#ffffff");
        for (uint32_t k = 0; k < d->nflows; k++) {
            const struct plot_flow *fl = &d->flows[k];
            if (fl->from != i)
                continue;
            out += fl->count;
            double share = (double)fl->count / (double)d->samples;
            diff_color(0.15 + 0.85 * sqrt((double)fl->count / max), color);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                       "stroke=\"" COLOR_GRID "\"><title>%.4f%%</title></rect>\n",
                    x0 + c * fl->to, ry, c, c, color, 100 * share);
            if (c >= 30)
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\" "
                           "fill=\"%s\">%s%.*f</text>\n", x0 + c * fl->to + c / 2, ry + c / 2 + 4,
                        (double)fl->count / max > 0.45 ? "#ffffff" : COLOR_TEXT,
                        share < 0.0001 ? "&lt;" : "", share < 0.001 ? 2 : 1,
                        share < 0.0001 ? 0.01 : 100 * share);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"" COLOR_DIM "\">%.2f%% out</text>\n",
                x0 + c * d->nnew + 8, ry + c / 2 + 4,
                d->samples ? 100.0 * (double)out / (double)d->samples : 0);
    }
    /* what each new server receives */
    double by = y0 + c * d->nold + 16;
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" fill=\"" COLOR_DIM "\">in (%%)</text>\n",
            x0 - 8, by);
    for (uint32_t j = 0; j < d->nnew; j++) {
        uint64_t in = 0;
        for (uint32_t k = 0; k < d->nflows; k++)
            if (d->flows[k].to == j)
                in += d->flows[k].count;
        if (in > 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\" fill=\""
                       COLOR_DIM "\">%.1f</text>\n", x0 + c * j + c / 2, by,
                    100.0 * (double)in / (double)d->samples);
    }
    fputs("</g>\n", f);
}

int plot_diff_svg(FILE *f, const struct plot_diff *pools, uint32_t npools)
{
    double w = 0, h = 0;
    for (uint32_t i = 0; i < npools; i++) {
        struct diff_geom g;
        diff_geometry(&pools[i], &g);
        w = fmax(w, g.width);
        h += g.height;
    }
    plot_head(f, fmax(w, 760), h + PLOT_MARGIN,
              npools == 1 ? pools[0].pool : "ringleader-ring --diff");
    double y = 0;
    for (uint32_t i = 0; i < npools; i++) {
        struct diff_geom g;
        diff_geometry(&pools[i], &g);
        diff_panel(f, &pools[i], y, &g);
        y += g.height;
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}
