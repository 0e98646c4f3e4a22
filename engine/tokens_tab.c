/* tokens_tab.c — the per-epoch tables of a token pipeline (see tokens_internal.h): the
 * documents in epoch order (and their prefix sums: concat; per bucket: bucket), built in
 * pieces by every thread that needs a table meanwhile, a few epochs cached. */
#include "engine/tokens_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void bfs_tokens_tab_free(epoch_tab *e)
{
    free(e->order);
    free(e->prefix);
    free(e->sums);
    free(e->by);
    e->order = e->prefix = e->sums = e->by = NULL;
    e->valid = 0;
}

static uint64_t tab_pieces(const bfs_tokens *t)
{
    return (t->npos + TAB_PIECE - 1) / TAB_PIECE;
}

/* Make e the table of epoch, to be built: its arrays (all it needs, so that running out of
 * memory shows before any piece is computed), no piece handed out. Locked. */
static int tab_start(bfs_tokens *t, uint64_t epoch, epoch_tab *e)
{
    bfs_tokens_tab_free(e);
    uint64_t n = t->npos; /* > 0 (bfs_tokens_create): a build of no pieces would never end */
    if (!(e->order = malloc(n * sizeof *e->order)) ||
        (t->o.pack == BFS_PACK_CONCAT && (!(e->prefix = malloc((n + 1) * sizeof *e->prefix)) ||
                                          !(e->sums = malloc(tab_pieces(t) * sizeof *e->sums)))) ||
        (t->o.pack == BFS_PACK_BUCKET && !(e->by = malloc(n * sizeof *e->by)))) {
        bfs_tokens_tab_free(e);
        return -ENOMEM;
    }
    e->epoch = epoch;
    e->building = 1;
    e->rc = 0;
    e->next = e->done = 0;
    return 0;
}

/* Piece c of e: its positions' documents in epoch order (and for concat the prefix sums
 * of their lengths from the piece's start, and its sum). Unlocked: pieces are disjoint. */
static int tab_piece(bfs_tokens *t, epoch_tab *e, uint64_t c)
{
    uint64_t first = c * TAB_PIECE, m = t->npos - first < TAB_PIECE ? t->npos - first : TAB_PIECE;
    int rc = t->mix ? bfs_mix_positions(t->mix, e->epoch, first, m, e->order + first)
                    : bfs_plan_positions(t->plan, e->epoch, first, m, e->order + first);
    if (rc || t->o.pack != BFS_PACK_CONCAT)
        return rc;
    uint64_t sum = 0;
    for (uint64_t p = first; p < first + m; p++) {
        sum += t->len[e->order[p]];
        e->prefix[p + 1] = sum;
    }
    e->sums[c] = sum;
    return 0;
}

/* After the last piece: concat's prefix sums made whole; bucket's documents sorted into
 * their buckets, in epoch order within each (into memory tab_start took: nothing fails).
 * Unlocked (e is still building). */
static void tab_finish(bfs_tokens *t, epoch_tab *e)
{
    uint64_t n = t->npos;
    if (t->o.pack == BFS_PACK_CONCAT) {
        e->prefix[0] = 0;
        uint64_t base = 0;
        for (uint64_t c = 0; c < tab_pieces(t); c++) {
            uint64_t first = c * TAB_PIECE, end = first + TAB_PIECE < n ? first + TAB_PIECE : n;
            for (uint64_t p = first; base && p < end; p++)
                e->prefix[p + 1] += base;
            base += e->sums[c];
        }
        free(e->sums);
        e->sums = NULL;
        return;
    }
    uint64_t fill[BFS_MAX_BUCKETS] = {0};
    for (uint64_t p = 0; p < n; p++) {
        uint64_t d = e->order[p];
        uint32_t b = t->bk[d];
        e->by[t->bstart[b] + fill[b]++] = d;
    }
    free(e->order);
    e->order = e->by;
    e->by = NULL;
}

/* The table of epoch, built if needed; release with tab_put. NULL with *rc on failure.
 * A table is built in pieces, outside the lock, by the thread that found it missing and
 * every thread that needs it meanwhile (at an epoch's start every worker does: one built
 * it alone, under the lock, ~60 ms for a million documents while the others waited). */
epoch_tab *bfs_tokens_tab_get(bfs_tokens *t, uint64_t epoch, int *rc)
{
    pthread_mutex_lock(&t->lock);
    epoch_tab *e = NULL, *victim = NULL;
    for (unsigned i = 0; i < EPOCH_TABS && !e; i++) {
        epoch_tab *c = &t->tabs[i];
        if ((c->valid || c->building) && c->epoch == epoch)
            e = c;
        else if (!c->refs && (!victim || !c->valid || (victim->valid && c->used < victim->used)))
            victim = c;
    }
    if (!e) {
        /* every entry in use by other epochs' rows: a private table, freed after use */
        e = victim ? victim : calloc(1, sizeof *e);
        int r = e ? tab_start(t, epoch, e) : -ENOMEM;
        if (r) {
            if (e && !victim)
                free(e);
            pthread_mutex_unlock(&t->lock);
            *rc = r;
            return NULL;
        }
        e->owned = !victim;
    }
    e->refs++;
    e->used = ++t->tick;
    uint64_t pieces = tab_pieces(t);
    while (e->building) {
        if (e->rc || e->next >= pieces) { /* all handed out (none more after an error) */
            pthread_cond_wait(&t->built, &t->lock);
            continue;
        }
        uint64_t c = e->next++;
        pthread_mutex_unlock(&t->lock);
        int r = tab_piece(t, e, c);
        pthread_mutex_lock(&t->lock);
        if (r && !e->rc)
            e->rc = r;
        if (++e->done < e->next || (!e->rc && e->next < pieces))
            continue;
        /* the last piece handed out is done: finish (still building: no one else looks) */
        if (!e->rc) {
            pthread_mutex_unlock(&t->lock);
            tab_finish(t, e);
            pthread_mutex_lock(&t->lock);
        } else {
            bfs_tokens_tab_free(e);
        }
        e->valid = !e->rc;
        e->building = 0;
        pthread_cond_broadcast(&t->built);
    }
    if (!e->valid) {
        *rc = e->rc ? e->rc : -EIO;
        int gone = --e->refs == 0 && e->owned;
        pthread_mutex_unlock(&t->lock);
        if (gone)
            free(e);
        return NULL;
    }
    pthread_mutex_unlock(&t->lock);
    return e;
}

void bfs_tokens_tab_put(bfs_tokens *t, epoch_tab *e)
{
    pthread_mutex_lock(&t->lock);
    int gone = --e->refs == 0 && e->owned;
    pthread_mutex_unlock(&t->lock);
    if (gone) {
        bfs_tokens_tab_free(e);
        free(e);
    }
}

int bfs_tokens_doc_order(bfs_tokens *t, uint64_t epoch, uint64_t p, uint64_t *doc)
{
    if (p >= t->npos)
        return -ERANGE;
    if (t->mix)
        return bfs_mix_positions(t->mix, epoch, p, 1, doc);
    return bfs_plan_position(t->plan, epoch, p, doc);
}
