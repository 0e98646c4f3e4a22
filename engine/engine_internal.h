/*
 * engine_internal.h — what engine.c and fields.c share: the engine's and a worker's state,
 * and the multi-field part of a batch (fields.c). Not for other modules: engine/api.h is
 * the engine's door.
 */
#ifndef BATCHFS_ENGINE_ENGINE_INTERNAL_H
#define BATCHFS_ENGINE_ENGINE_INTERNAL_H

#include "engine/engine.h"
#include "engine/augment.h"
#include "engine/decode.h"
#include "engine/mix.h"
#include "engine/plan.h"
#include "engine/resize.h"
#include "engine/safetensors.h"
#include "engine/tokens.h"
#include "engine/dataset/bfs.h"
#include "engine/dataset/source.h"
#include "cache/samplecache.h"

#include <pthread.h>
#include <stdatomic.h>

/*
 * Multi-field datasets (.bfs version 3): the fields served (fields=) beyond the primary
 * image, which fills `images`. Each becomes one or two field tensors of the batch
 * (safetensors.h): further images a tensor like `images`; variable values (text, bytes,
 * tokens, variable arrays, boxes) NAME [B, L, row...] zero-padded and NAME_lengths (boxes:
 * NAME_counts) I32 [B]; fixed arrays NAME [B, shape...]. L is the field's max_count in
 * rows (text: text_len when set), from the field table: every batch of a mount has one
 * size, known before any payload is read (docs/multimodal.md weighs this against the
 * bytes a per-batch L would save).
 */
typedef struct served_field served_field;
/* What the transforms of one sample share: the geometry its primary image was rendered
 * with, and for each boxes field already stored the source rows it kept (keep[f] and
 * kept[f]; keep[f] NULL: every row, as stored), so that a per-box field following it
 * (bfs_field.follows, always a later field) keeps the same rows. */
typedef struct sample_state {
    const bfs_geometry *g;
    double min_area;                     /* min_box_area= */
    uint32_t *keep_mem;                  /* the worker's room for every boxes field's keep list */
    const uint32_t *keep[BFS_FIELD_MAX]; /* by dataset field index */
    uint32_t kept[BFS_FIELD_MAX];
} sample_state;
/* A per-sample transform of a variable value before it is stored: in[0, rows) rows of
 * the stored value; it writes at most cap rows to out and returns how many (a boxes
 * transform records its keep list in st). NULL: served as stored. The crop-following
 * boxes transform (bfs_augment_boxes, docs/multimodal.md) plugs in here, for boxes
 * fields and the fields that follow them. */
typedef uint32_t (*value_transform_fn)(const served_field *sf, sample_state *st, const uint8_t *in,
                                       uint32_t rows, uint8_t *out, uint32_t cap);
struct served_field {
    uint32_t f; /* dataset field index */
    const bfs_field *decl;
    int variable;           /* padded rows + lengths */
    uint32_t rows;          /* variable: L, the padded rows */
    uint64_t row_bytes;     /* bytes of one row (variable) or of the whole value (fixed) */
    uint32_t row_elems;     /* elements per row (variable), of the value (fixed) */
    uint64_t slot_bytes;    /* bytes of one sample in its data tensor */
    uint32_t t_data, t_len; /* field tensor indices (t_len: variable only) */
    int text_cut;           /* text_len= applies: cut at a character boundary */
    uint32_t t_mask;        /* tokens fields: NAME_mask U8 [B, L] (t_mask_set) */
    int t_mask_set;
    value_transform_fn transform;
    uint32_t keep_field; /* boxes and per-box values: the boxes field whose kept rows count */
    uint32_t keep_off;   /* boxes: where its keep list lies in a worker's keep memory */
};

struct bfs_engine {
    bfs_pipeline_opts o;
    bfs_source *src;
    bfs_plan *plan;     /* image datasets */
    bfs_mix *mix;       /* image mixtures (source=, mix.h): replaces the plan */
    uint32_t t_sources; /* mixtures: the field tensor `sources` I64 [B] */
    uint64_t mix_first[BFS_MIX_SOURCES + 1];      /* mixtures: each source's first global index */
    uint32_t nmix;                                /* mixtures: sources (0: not a mixture) */
    char *mix_text;                               /* mixtures: "PATH:W, PATH:W" (source_path) */
    _Atomic uint64_t mix_served[BFS_MIX_SOURCES]; /* samples begun per source (/stats) */
    bfs_tokens *tok; /* token datasets (tokens.h): replaces the plan and the image path */
    bfs_out_format fmt;
    int has_ops; /* bfs_augment_has_ops(&o): the primary image gets recipe ops */
    int erasing; /* erasing= with augment=train: its erased box after normalize */
    uint64_t fingerprint;
    char canonical[BFS_CANONICAL_MAX];
    bfs_samplecache *scache; /* sample_cache_mb > 0; thread-safe itself (samplecache.h) */
    _Atomic uint64_t encode_ns;
    /* bad samples already logged: an open-addressing set of index+1, guarded by log_lock */
    pthread_mutex_t log_lock;
    bfs_bad_sample recent[BFS_ENGINE_RECENT_BAD]; /* a ring of the last logged, log_lock */
    uint64_t recent_n;
    uint64_t *logged;
    size_t logged_cap, logged_n;
    _Atomic int changed_logged; /* BFS_E_CHANGED said once */
    /* multi-field datasets: read-only after create */
    uint32_t primary; /* the dataset field that fills `images` (0 for other datasets) */
    served_field served[BFS_FIELD_MAX];
    uint32_t n_served;
    bfs_st_field_tensor tensors[BFS_ST_MAX_FIELD_TENSORS];
    uint32_t n_tensors;
    char tensor_names[BFS_ST_MAX_FIELD_TENSORS][BFS_ST_NAME_MAX + 1];
    uint32_t keep_rows; /* rows of keep lists a sample's boxes fields may need */
    uint32_t t_padded;  /* pad=1: the `padded` U8 [B] tensor (1: a repeated sample) */
    uint32_t t_targets; /* mixup=, cutmix=, label_smoothing=: `targets` F32 [B, classes] */
    uint32_t classes;   /* the targets' width; 0: no targets */
    /* the layout of a full batch (batch= samples), computed once: a layout depends on B
     * and the tensors only (safetensors.h), and sizing the widest JSON of a dozen field
     * tensors for every sample cost microseconds each */
    bfs_st_layout full;
    int full_ok;
    uint64_t max_bytes; /* the largest batch of any epoch (images; set at create) */
};

struct bfs_engine_worker {
    bfs_engine *e;
    bfs_decoder *dec;
    bfs_source_scratch scratch;
    bfs_tokens_scratch ts;
    resize_scratch rs;
    /* counters: written by the owner thread, read racily by monitors */
    _Atomic uint64_t samples, read_ns, decode_ns, resize_ns, bad, texts_cut;
    _Atomic uint64_t augment_ns;                                /* the recipe ops, all together */
    _Atomic uint64_t op_ns[BFS_STAGE_OPS], op_n[BFS_STAGE_OPS]; /* per op: time, uses */
    uint8_t *aug; /* the sample being augmented (out_w x out_h RGB), then its scratch */
    size_t aug_cap;
    uint8_t *rows; /* a transform's output rows (grown as needed) */
    size_t rows_cap;
    uint32_t *keep_mem; /* e->keep_rows: boxes fields' keep lists (sample_state) */
};

/* the stage counters after the ops': per erased sample, per mixed or targeted batch */
enum {
    BFS_STAGE_ERASING = 17 /* BFS_OP_COUNT (imgops.h) */,
    BFS_STAGE_MIXUP,
    BFS_STAGE_CUTMIX,
    BFS_STAGE_TARGETS, /* a batch with targets, not mixed */
    BFS_STAGE_END
};

/* bfs_engine_image_layout - the descriptor and layout of image batch k of epoch (its
 * length, that epoch's size): 0, or bfs_st_batch_layout's error. */
int bfs_engine_image_layout(const bfs_engine *e, uint64_t epoch, uint64_t k, bfs_st_batch_desc *d,
                            bfs_st_layout *lay);

/* bfs_engine_render_augmented - the primary image with recipe ops (engine_recipe.c): resize
 * (and flip) src per sp into w->aug, apply the sample's ops there, then store it through
 * the output writer into slot. t0: when the resize began. 0 or an error. */
int bfs_engine_render_augmented(bfs_engine *e, bfs_engine_worker *w, uint64_t epoch, uint64_t key,
                                const resize_spec *sp, const resize_src *src,
                                const bfs_out_slot *slot, uint64_t t0);

static inline void bfs_engine_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/*
 * bfs_fields_add_tensor - add a field tensor called name+suffix to e->tensors (dt, ndim
 * dimensions of shape per sample; image: a tensor like `images`), its index in *idx.
 * Returns 0 or -EINVAL with the message in err when the name is taken or there are too
 * many.
 */
int bfs_fields_add_tensor(bfs_engine *e, const char *name, const char *suffix, bfs_dtype dt,
                          uint32_t ndim, const uint64_t *shape, int image, uint32_t *idx, char *err,
                          size_t errlen);

/*
 * bfs_fields_plan - choose the fields served (fields=, text_len=, token_len=,
 * min_box_area=) and plan their tensors into e->served and e->tensors. Returns 0 or
 * -EINVAL with the message in err (naming the dataset and the field).
 */
int bfs_fields_plan(bfs_engine *e, char *err, size_t errlen);

/*
 * bfs_fields_store - store field sf of dataset sample idx into slot j of its tensors:
 * padded rows, the length (and mask) of a variable value, through its transform (boxes
 * follow st's geometry; per-box values the rows kept), or a fixed value (zeros when an
 * optional one is absent). Returns 0 or the source's error for the value.
 */
int bfs_fields_store(bfs_engine *e, bfs_engine_worker *w, const served_field *sf, uint64_t idx,
                     sample_state *st, uint8_t *dst, const bfs_st_layout *lay, uint32_t j);

/* bfs_fields_clear - slot j of non-image field sf empty: zeros, length 0, mask 0. */
void bfs_fields_clear(const served_field *sf, uint8_t *dst, const bfs_st_layout *lay, uint32_t j);

#endif
