/*
 * top.h — `batchfs top MNT`: a live view of a mount, read from MNT/stats.
 *
 * Neighbours: programs/batchfs_main.c calls bfs_top_run for BFS_MODE_TOP (mountopts/);
 * MNT/stats is written by engine/service.c (bfs_service_stats) and parsed with
 * programs/statsjson.h. Only MNT/stats is read, so a directory holding a `stats` file
 * stands in for a mount in tests.
 *
 * Every key of /stats is optional to the view: a missing one shows as "-", one of an
 * unexpected type too, unknown ones are ignored. Rates ("now") are differences between
 * two successive samples over the time between them, measured here; averages since the
 * daemon started come from its own counters. A counter that went down (the mount was
 * replaced by a new daemon: uptime or fingerprint changed) gives no rate for that step.
 */
#ifndef BATCHFS_PROGRAMS_TOP_H
#define BATCHFS_PROGRAMS_TOP_H

#include <stdio.h>
#include <time.h>

#include "programs/statsjson.h"

#include "mountopts/mountopts.h" /* BFS_TOP_INTERVAL_MIN/MAX: the command line's limits */

/*
 * bfs_top_run - watch mount mnt: read mnt/stats every interval_s seconds, `iterations`
 * times (0: until stopped).
 *
 * When out is a terminal: a full-screen view (alternate screen, cursor hidden; the
 * keyboard, on stdin or else /dev/tty, in non-canonical no-echo mode), redrawn at once
 * and after each interval and on a window size change; `q` or Ctrl-C (SIGINT), SIGTERM
 * or SIGHUP end it; Ctrl-Z suspends with the terminal restored. The terminal is restored
 * on every way out of this function.
 * Otherwise: one plain line per interval (see bfs_top_render), flushed; SIGINT, SIGTERM
 * or SIGHUP end it.
 *
 * Returns 0 when stopped by the user or after `iterations`. Errors, each with a message
 * on stderr naming the path: -ENOENT / -ENOTDIR mnt has no stats file (not a batchfs
 * mount), -EINVAL mnt/stats is not batchfs statistics, or interval_s out of
 * [BFS_TOP_INTERVAL_MIN, BFS_TOP_INTERVAL_MAX]; another negative errno when reading
 * mnt/stats fails, at start or later (the mount went away: -ENOTCONN, -ENOENT, ...).
 * Signal handlers for SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP and SIGCONT are
 * installed for the duration of the call and the previous ones put back.
 */
int bfs_top_run(const char *mnt, double interval_s, int iterations, FILE *out);

/* What bfs_top_render draws. */
typedef struct bfs_top_view {
    const char *mnt;   /* shown in the title */
    int screen;        /* 1: a full-screen frame; 0: one plain line */
    int cols, rows;    /* screen: the terminal's size (each clamped to 1..1000) */
    time_t when;       /* the sample's wall-clock time (plain line: its timestamp) */
    double interval_s; /* screen: shown in the title */
} bfs_top_view;

/*
 * bfs_top_render - draw the statistics `cur` to out; rates are taken against `prev`
 * (NULL: none yet; they show as "-"), sampled dt seconds earlier. Any parsed document
 * is accepted (tested by tests/fuzz/fuzz_stats_json.c): types not as expected show "-".
 *
 * screen = 0: one line, ending in '\n', of space-separated fields, in this order:
 *   YYYY-MM-DDTHH:MM:SS images/s=R avg_images/s=R batches/s=R served=N computed=N
 *   in_flight=N hit%=P dir_hit%=P sample_hit%=P threads=N prefetch=N readers=N
 *   served_MiB/s=R
 * where R and P are "now" rates (P the share of lookups that hit, over the last step),
 * avg_images/s the daemon's average since it started, served_MiB/s the sizes of the batch
 * files opened (batches.opened_bytes: under passthrough their reads never reach the
 * daemon), and any value may be "-".
 * screen = 1: at most `rows` lines of at most `cols` visible columns, starting with
 * "\033[H" (cursor home), each ending in "\033[K" (clear the rest of the line), the frame
 * in "\033[J" (clear below); strings from the statistics are shown with control
 * characters replaced by '?', so they cannot move the cursor.
 */
void bfs_top_render(const bfs_top_view *v, const sj_doc *prev, const sj_doc *cur, double dt,
                    FILE *out);

#endif
