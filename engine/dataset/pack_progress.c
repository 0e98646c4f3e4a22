/*
 * pack_progress.c — what every packer (pack.c's images, pack_tokens.c's token sequences)
 * shares with its command line: the progress bar's line, and the path of the temporary
 * output file a signal handler removes (bfs_pack_temp_path). See pack_internal.h.
 */
#include "engine/dataset/pack_internal.h"
#include "base/clock.h"

#include <stdio.h>

char bfs_pack_temp_file[4096]; /* for signal handlers: see bfs_pack_temp_path */

/* The progress bar's line: frac done, what is counted (e.g. "12/40 files"), the bytes
 * read so far; at most ten redraws a second, and always the final one. */
void bfs_pack_progress_line(const bfs_pack_opts *o, double frac, const char *count,
                            uint64_t bytes_in, double t0, int final)
{
    static double last;
    double t = bfs_mono_s();
    if (!o->progress || !o->progress_out || (!final && t - last < 0.1))
        return;
    last = t;
    double el = t - t0;
    double mbs = el > 0 ? bytes_in / el / 1e6 : 0;
    double eta = frac > 0 ? el / frac - el : 0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(o->progress_out, "\r[%s] %3.0f%% %s  %.1f MB  %.1f MB/s  ETA %.0fs   %s", bar,
            frac * 100, count, bytes_in / 1e6, mbs, eta, final ? "\n" : "");
    fflush(o->progress_out);
}
