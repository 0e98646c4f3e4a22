/*
 * mkbatchfs — pack an ImageFolder (or WebDataset / TFRecord shards) into a .bfs dataset
 * file, and inspect one.
 *
 *   mkbatchfs [--jobs N] [--max-side PX] [--quality Q] [--raw] [--restart|--no-restart] [--strict]
 *     SRC OUT.bfs
 *     (SRC: an ImageFolder directory, or a .bfs file to re-pack)
 *   mkbatchfs [OPTIONS] [--format webdataset|tfrecord] [--image-key K] [--label-key K]
 *     SHARDS... OUT.bfs
 *   mkbatchfs --info F.bfs | --cat F.bfs I | --verify F.bfs
 *
 * Exit status: 0 success; 1 failure (message on stderr); 2 usage error; 130 interrupted.
 *
 * The command line only: packing and inspecting are the engine's (bfs_dataset_* of
 * engine/api.h, engine/dataset_api.c over the packer and reader of engine/dataset/).
 */
#include "engine/api.h"
#include "base/err.h"
#include "programs/spm.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int cancel_flag; /* (lock-free: a signal handler may set it, workers read it) */

static void on_signal(int sig)
{
    if (cancel_flag) { /* second signal: do not wait for a clean stop */
        const char *t = bfs_dataset_temp_path();
        if (t)
            unlink(t);
        _exit(128 + sig);
    }
    cancel_flag = 1;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: mkbatchfs [OPTIONS] SRC OUT.bfs     pack an ImageFolder into a dataset file\n"
        "       mkbatchfs [OPTIONS] SHARDS... OUT.bfs\n"
        "                                           pack WebDataset .tar or TFRecord shards\n"
        "       mkbatchfs [OPTIONS] MANIFEST.jsonl|.csv... OUT.bfs\n"
        "                                           pack the images a manifest lists\n"
        "       mkbatchfs --tokens u16|u32 --doc-sep T TOKENS.bin OUT.bfs\n"
        "       mkbatchfs --tokens npy --offsets DOCS.npy TOKENS.npy OUT.bfs\n"
        "       mkbatchfs --tokens megatron PREFIX[.bin|.idx] OUT.bfs\n"
        "                                           pack token sequences (one per document)\n"
        "       mkbatchfs --tokenize FIELD=MODEL[:bos][:eos][:as=NAME] SRC... OUT.bfs\n"
        "                                           add a text field's SentencePiece ids\n"
        "       mkbatchfs --info F.bfs              describe a dataset file\n"
        "       mkbatchfs --cat F.bfs I [FIELD]     write sample I's stored bytes (of FIELD) to\n"
        "                                           stdout\n"
        "       mkbatchfs --verify F.bfs            check every checksum\n"
        "\n"
        "SRC is an ImageFolder: one sub-directory per class (labels 0..C-1 in sorted name\n"
        "order), JPEG, PNG and WebP images inside named *.jpg, *.jpeg, *.png or *.webp,\n"
        "any case (sorted; sub-directories walked; other files and hidden ones are not\n"
        "samples). Files that are none of these images, cannot be read or do not\n"
        "decode whole (every image is decoded once, whatever the options: a file cut\n"
        "short or with bad bytes is corrupt) are skipped and listed at the end with\n"
        "the reason. SRC may also be\n"
        "a .bfs file: its samples are re-packed in order, with their labels and class\n"
        "names (e.g. mkbatchfs old.bfs new.bfs upgrades an older pack to restart\n"
        "markers); corrupt samples are skipped, corrupt tables refused. A .bfs of\n"
        "several fields (version 3) is copied value by value, images as they are\n"
        "(no --max-side, --raw or restart markers); a sample with a corrupt value is\n"
        "left out and listed.\n"
        "\n"
        "SHARDS are WebDataset tar shards (*.tar) or TFRecord files of tf.train.Example\n"
        "(*.tfrecord, *.tfrecords, *.tfrecord-*): files, directories holding them (and no\n"
        "sub-directory), or quoted glob patterns; other names with --format. Shards are\n"
        "read as streams in path order, samples in their order. WebDataset: a sample is\n"
        "the files sharing a key (the name up to the first '.' of its last part): the\n"
        "image KEY.jpg or KEY.jpeg, the label KEY.cls (a decimal integer) or, without\n"
        "one, an integer in KEY.json. TFRecord: each record's CRCs are checked; the image\n"
        "is the bytes feature image/encoded, the label the int64 feature\n"
        "image/class/label; GZIP- and ZLIB-compressed files are read too. Labels are\n"
        "kept as they are (0..16777215); the classes are 0..the largest label, each\n"
        "named by its number. Samples without an image or a label, or whose image is\n"
        "not a JPEG that decodes whole, are skipped and listed at the end (SHARD:KEY,\n"
        "SHARD:record N); a malformed shard (bad tar header, bad CRC, a file cut short,\n"
        "corrupt compressed data) stops the pack with the file and the byte.\n"
        "\n"
        "Fields: every member of a shard sample is kept as a named field (a .bfs\n"
        "version 3 file), as the first sample has them: WebDataset by extension\n"
        "(jpg/jpeg/png/webp image, txt text, cls label, json bytes, npy array, other\n"
        "bytes), TFRecord by feature (bytes: image when it is one, else bytes;\n"
        "int64_list: array i64, the --label-key feature the label; float_list: array\n"
        "f32). Fields other than the image are optional; members a later sample adds\n"
        "are not kept (counted). A sample whose first image is the only field is\n"
        "written as version 1, as before. MANIFEST: JSON Lines or CSV (header line),\n"
        "one sample per line; the column image, path, file_name, filepath or filename\n"
        "(or --image-key) is the image's path relative to the manifest; every other\n"
        "column is a field (a string text, an integer array i64 or the label if the\n"
        "column is label or cls, a number or list of numbers an array). Skipped\n"
        "samples name the line (MANIFEST:line N). See docs/multimodal.md.\n"
        "\n"
        "What is stored: colour JPEGs are losslessly re-encoded with restart markers\n"
        "(--restart, the default: identical pixels, other bytes); --no-restart keeps\n"
        "every file's bytes as they are, and so do gray, CMYK and odd-sampled JPEGs,\n"
        "PNG and WebP images.\n"
        "--cat writes the stored bytes.\n"
        "\n"
        "options:\n"
        "  -j, --jobs N         worker threads (default: online CPUs)\n"
        "  -m, --max-side PX    re-encode images whose longer side exceeds PX (antialiased\n"
        "                       bilinear shrink; PNG and WebP as JPEG too); others keep\n"
        "                       their bytes (default: off)\n"
        "  -q, --quality Q      JPEG quality of re-encoded images, 1..100 (default 90)\n"
        "  -r, --raw            store decoded RGB pixels, lz4-compressed, instead of the\n"
        "                       image's bytes\n"
        "                       (for small images, e.g. CIFAR-size; combine with --max-side)\n"
        "  -R, --restart        losslessly re-encode colour JPEGs (4:2:0, 4:2:2, 4:4:0, 4:4:4)\n"
        "                       with a restart marker after every MCU and optimized Huffman\n"
        "                       tables: the same pixels, and random crops decode ~1.5x\n"
        "                       faster (only the crop's segments are decoded); packing is\n"
        "                       CPU-bound (default: on, except with --raw)\n"
        "      --no-restart     keep the JPEG bytes as they are (each is still decoded once\n"
        "                       to check it: ~0.7 ms of CPU per ImageNet-size photo, a\n"
        "                       quarter of --restart's cost)\n"
        "  -s, --strict         fail on the first file (or sample of a shard) that would be\n"
        "                       skipped\n"
        "      --tokenize FIELD=MODEL[:bos][:eos][:as=NAME]\n"
        "                       add the ids of text field FIELD by the SentencePiece model\n"
        "                       MODEL (a .model file; :bos, :eos add its begin/end ids) as\n"
        "                       a tokens field FIELD_tokens (or NAME), u16 or u32 by the\n"
        "                       vocabulary; SRC a .bfs with captions, or sources packed\n"
        "                       first (one thread: tokenized once here, not every epoch)\n"
        "  -f, --format F       SHARDS are webdataset, tfrecord or manifest whatever their\n"
        "                       names (default: told by the names); a directory's files\n"
        "                       too, unless some have the format's names: then only those\n"
        "      --field NAME=MEMBER[:KEY][:KIND[:DTYPE]][:follows=F][:optional]\n"
        "                       keep only the fields named so (repeatable): MEMBER is an\n"
        "                       extension, a feature or a column, KEY a key of its JSON\n"
        "                       object; KIND image, text, tokens, array, boxes, bytes or\n"
        "                       label (the sample's label), DTYPE of an array u8 u16 u32\n"
        "                       i32 i64 f32; follows=F: one value per box of boxes field\n"
        "                       F; required unless :optional (a sample without it is\n"
        "                       skipped). The first image is field 0. E.g. --field\n"
        "                       image=jpg --field caption=txt:text --field\n"
        "                       boxes=json:boxes:boxes --field label=cls:label\n"
        "      --image-only     shards: keep the image and the label alone, as before\n"
        "                       (version 1)\n"
        "      --image-key K    WebDataset: the image's extension (default: jpg or jpeg);\n"
        "                       TFRecord: its bytes feature (default: image/encoded);\n"
        "                       manifest: its column (default: image, path, file_name)\n"
        "      --label-key K    WebDataset: the label's key in KEY.json, used when there\n"
        "                       is no KEY.cls (default: label); TFRecord: its int64\n"
        "                       feature (default: image/class/label); manifest: its\n"
        "                       column (default: label or cls)\n"
        "  -t, --tokens FORMAT  SRC holds token ids, packed one sample per document:\n"
        "                       u16, u32: a flat file of ids of that width, little-endian\n"
        "                       (nanoGPT's train.bin), documents ended by --doc-sep;\n"
        "                       npy: a .npy of shape (N,), documents at --offsets;\n"
        "                       megatron: Megatron-LM's indexed dataset (PREFIX.bin and\n"
        "                       PREFIX.idx), one sample per document of its index\n"
        "      --doc-sep T      u16/u32: the token that ends each document, kept as its\n"
        "                       last token (GPT-2's <|endoftext|> is 50256)\n"
        "      --offsets F      npy: a .npy of integers, the documents' starts (0 first)\n"
        "                       or their N+1 boundaries (0 first, N last)\n"
        "  -p, --page-size B    payload page size, power of two, K/M suffix (default 8M)\n"
        "      --no-fsync       do not fsync the result before renaming it into place\n"
        "      --quiet          no progress bar or summary\n"
        "  -h, --help           this help\n"
        "  -V, --version        print the version\n");
}

static int parse_int(const char *s, const char *what, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "mkbatchfs: %s: '%s' is not an integer in [%ld, %ld]\n", what, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_size(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = !errno && end != s && (*end == 'K' || *end == 'k') && !end[1]   ? 10
                : !errno && end != s && (*end == 'M' || *end == 'm') && !end[1] ? 20
                                                                                : 0;
    if (errno || end == s || (*end && !shift) || s[0] == '-' ||
        v > (BFS_DATASET_PAGE_SIZE_MAX >> shift))
        v = 0; /* rejected below; also catches a shift that would overflow */
    else
        v <<= shift;
    if (v < BFS_DATASET_PAGE_SIZE_MIN || v > BFS_DATASET_PAGE_SIZE_MAX || (v & (v - 1))) {
        fprintf(stderr, "mkbatchfs: --page-size: '%s' is not a power of two between 4K and 1024M\n",
                s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* --cat F I [FIELD]; like --info and --verify (main), the engine's inspector
 * (bfs_dataset_*): what it finds on stdout, each problem on stderr, exit status 1 when the
 * file is not sound */
static int cmd_cat(const char *path, const char *index, const char *field)
{
    long i;
    if (parse_int(index, "--cat index", 0, LONG_MAX, &i))
        return 2;
    return bfs_dataset_cat("mkbatchfs", path, (uint64_t)i, field, STDOUT_FILENO, stderr) ? 1 : 0;
}

static int cmd_pack(const char *const *srcs, size_t nsrcs, const char *out,
                    bfs_dataset_pack_opts *o, int quiet)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    o->progress = !quiet && isatty(STDERR_FILENO);
    o->progress_out = stderr;
    bfs_dataset_report rep;
    char err[1024] = "";
    int rc = bfs_dataset_pack(srcs, nsrcs, out, o, &rep, &cancel_flag, err, sizeof err);
    const char *unit = rep.format ? "samples" : "files";
    if (rc == -ECANCELED) {
        fprintf(stderr, "mkbatchfs: interrupted; %s not written\n", out);
        bfs_dataset_report_free(&rep);
        return 130;
    }
    if (rep.notes[0] && !quiet)
        fputs(rep.notes, stderr);
    if (rep.nskipped && !quiet) {
        fprintf(stderr, "skipped %llu of %llu %s:\n", (unsigned long long)rep.nskipped,
                (unsigned long long)rep.files, unit);
        for (uint64_t i = 0; i < rep.nskipped && i < 100; i++)
            fprintf(stderr, "  %s: %s\n", rep.skipped[i].path, rep.skipped[i].reason);
        if (rep.nskipped > 100)
            fprintf(stderr, "  ... and %llu more\n", (unsigned long long)(rep.nskipped - 100));
    }
    if (rc) {
        fprintf(stderr, "mkbatchfs: %s\n", err[0] ? err : bfs_strerror(rc));
        bfs_dataset_report_free(&rep);
        return 1;
    }
    int tokens = o->tokens || o->token_format;
    if (!quiet && tokens)
        fprintf(stderr,
                "packed %llu tokens (u%d) in %llu documents, %llu tokens the longest, into %s "
                "in %.2f s (%.1f MB/s)\n",
                (unsigned long long)rep.tokens, rep.token_size * 8, (unsigned long long)rep.packed,
                (unsigned long long)rep.longest, out, rep.seconds,
                rep.seconds > 0 ? rep.bytes_in / rep.seconds / 1e6 : 0.0);
    if (!quiet && tokens && rep.ignored)
        fprintf(stderr, "%llu empty documents left out (a sample holds one token at least)\n",
                (unsigned long long)rep.ignored);
    else if (!quiet && !tokens)
        fprintf(stderr,
                "packed %llu samples in %u classes (%.1f MB%s) into %s in %.2f s (%.1f MB/s)%s\n",
                (unsigned long long)rep.packed, rep.classes, rep.bytes_out / 1e6,
                o->raw ? ", raw lz4" : "", out, rep.seconds,
                rep.seconds > 0 ? rep.bytes_in / rep.seconds / 1e6 : 0.0,
                !rep.nskipped ? ""
                : rep.format  ? "; some samples skipped, see above"
                              : "; some files skipped, see above");
    if (!quiet && rep.format)
        fprintf(stderr, "read %llu %s%s\n", (unsigned long long)rep.shards,
                rep.format == BFS_DATASET_FORMAT_WEBDATASET ? "WebDataset shard"
                : rep.format == BFS_DATASET_FORMAT_TFRECORD ? "TFRecord shard"
                                                            : "manifest",
                rep.shards == 1 ? "" : "s");
    if (!quiet && rep.fields[0])
        fprintf(stderr, "fields: %s%s\n", rep.fields,
                rep.nfields == 1 ? " (the image alone: written as version 1)" : "");
    if (o->restart && !quiet && rep.packed && !rep.tokens)
        fprintf(stderr, "%llu of %llu samples are JPEGs with a restart marker after every MCU%s\n",
                (unsigned long long)rep.restarted, (unsigned long long)rep.packed,
                rep.restarted < rep.packed ? " (the others, gray, CMYK, of odd sampling, raw, "
                                             "PNG or WebP, are decoded whole anyway and keep "
                                             "their bytes)"
                                           : "");
    if (rep.reencoded && !quiet)
        fprintf(stderr, "re-encoded %llu images to a longer side of at most %d px\n",
                (unsigned long long)rep.reencoded, o->max_side);
    bfs_dataset_report_free(&rep);
    return 0;
}

/*
 * --tokenize FIELD=MODEL[:bos][:eos][:as=NAME]: the ids of text field FIELD by the
 * SentencePiece model MODEL, added as a tokens field (FIELD_tokens, or NAME). src is a
 * version 3 .bfs, or anything cmd_pack takes: then packed first into a temporary file
 * next to out, removed at the end.
 */
static int cmd_tokenize(const char *spec, const char *const *srcs, size_t nsrcs, const char *out,
                        bfs_dataset_pack_opts *o, int quiet)
{
    char field[64], model[4096], as[64] = "";
    unsigned flags = 0;
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof field) {
        fprintf(stderr, "mkbatchfs: --tokenize '%s': expected FIELD=MODEL[:bos][:eos][:as=NAME]\n",
                spec);
        return 2;
    }
    memcpy(field, spec, (size_t)(eq - spec));
    field[eq - spec] = '\0';
    snprintf(model, sizeof model, "%s", eq + 1);
    /* trailing :bos, :eos, :as=NAME (a model path may hold ':' elsewhere) */
    for (char *c; (c = strrchr(model, ':'));) {
        if (!strcmp(c, ":bos"))
            flags |= BFS_SPM_BOS;
        else if (!strcmp(c, ":eos"))
            flags |= BFS_SPM_EOS;
        else if (!strncmp(c, ":as=", 4) && c[4] && strlen(c + 4) < sizeof as)
            snprintf(as, sizeof as, "%s", c + 4);
        else
            break;
        *c = '\0';
    }
    bfs_spm *m;
    char err[1024] = "";
    int rc = bfs_spm_load(model, flags, &m, err, sizeof err);
    if (rc) {
        fprintf(stderr, "mkbatchfs: --tokenize: %s\n", err);
        return rc == -EINVAL || rc == -ENOENT ? 2 : 1;
    }
    /* a .bfs source is tokenized as it is; anything else is packed first */
    char tmp[4200] = "";
    const char *from = srcs[0];
    if (nsrcs != 1 || bfs_dataset_open_check(srcs[0], NULL, 0)) {
        snprintf(tmp, sizeof tmp, "%s.untokenized-%ld", out, (long)getpid());
        int prc = cmd_pack(srcs, nsrcs, tmp, o, quiet);
        if (prc) {
            bfs_spm_free(m);
            return prc;
        }
        from = tmp;
    }
    bfs_dataset_tokenize_opts t = {.field = field,
                                   .out_field = as[0] ? as : NULL,
                                   .vocab = bfs_spm_vocab(m),
                                   .fn = bfs_spm_encode,
                                   .ctx = m};
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    o->progress = !quiet && isatty(STDERR_FILENO);
    o->progress_out = stderr;
    bfs_dataset_report rep;
    rc = bfs_dataset_tokenize(from, out, &t, o, &rep, &cancel_flag, err, sizeof err);
    if (tmp[0])
        unlink(tmp);
    bfs_spm_free(m);
    if (rc == -ECANCELED) {
        fprintf(stderr, "mkbatchfs: interrupted; %s not written\n", out);
        return 130;
    }
    if (rc) {
        fprintf(stderr, "mkbatchfs: --tokenize: %s\n", err[0] ? err : bfs_strerror(rc));
        return 1;
    }
    if (!quiet)
        fprintf(stderr,
                "tokenized field %s of %llu samples into field %s%s (u%d, vocabulary %u): %llu "
                "tokens, %llu the longest, in %.2f s; written to %s\n",
                field, (unsigned long long)rep.packed, as[0] ? as : field, as[0] ? "" : "_tokens",
                rep.token_size * 8, t.vocab, (unsigned long long)rep.tokens,
                (unsigned long long)rep.longest, rep.seconds, out);
    return 0;
}

int main(int argc, char **argv)
{
    enum {
        OPT_NO_FSYNC = 256,
        OPT_QUIET,
        OPT_INFO,
        OPT_CAT,
        OPT_VERIFY,
        OPT_NO_RESTART,
        OPT_DOC_SEP,
        OPT_OFFSETS,
        OPT_IMAGE_KEY,
        OPT_LABEL_KEY,
        OPT_TOKENIZE,
        OPT_FIELD,
        OPT_IMAGE_ONLY
    };
    static const struct option longopts[] = {
        {"jobs", required_argument, NULL, 'j'},
        {"max-side", required_argument, NULL, 'm'},
        {"quality", required_argument, NULL, 'q'},
        {"raw", no_argument, NULL, 'r'},
        {"restart", no_argument, NULL, 'R'},
        {"no-restart", no_argument, NULL, OPT_NO_RESTART},
        {"strict", no_argument, NULL, 's'},
        {"tokens", required_argument, NULL, 't'},
        {"doc-sep", required_argument, NULL, OPT_DOC_SEP},
        {"offsets", required_argument, NULL, OPT_OFFSETS},
        {"format", required_argument, NULL, 'f'},
        {"image-key", required_argument, NULL, OPT_IMAGE_KEY},
        {"label-key", required_argument, NULL, OPT_LABEL_KEY},
        {"tokenize", required_argument, NULL, OPT_TOKENIZE},
        {"field", required_argument, NULL, OPT_FIELD},
        {"image-only", no_argument, NULL, OPT_IMAGE_ONLY},
        {"page-size", required_argument, NULL, 'p'},
        {"no-fsync", no_argument, NULL, OPT_NO_FSYNC},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"info", no_argument, NULL, OPT_INFO},
        {"cat", no_argument, NULL, OPT_CAT},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    bfs_dataset_pack_opts o = {.quality = 90, .fsync = 1};
    int quiet = 0, mode = 0, c, restart = -1; /* -1: not given, on unless --raw */
    int image_opts = 0;                       /* --max-side, --quality or --raw given */
    long doc_sep = -1;
    int tokens_given = 0;
    const char *tokenize = NULL;
    long v;
    const char *fields[BFS_DATASET_FIELDS_MAX + 1];
    char names[BFS_DATASET_FIELDS_MAX + 1][BFS_DATASET_FIELD_NAME_MAX + 1];
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":j:m:q:rRst:f:p:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            if (parse_int(optarg, "--jobs", 1, 256, &v))
                return 2;
            o.jobs = (int)v;
            break;
        case 'm':
            image_opts = 1;
            if (parse_int(optarg, "--max-side", 1, 65535, &v))
                return 2;
            o.max_side = (int)v;
            break;
        case 'q':
            image_opts = 1;
            if (parse_int(optarg, "--quality", 1, 100, &v))
                return 2;
            o.quality = (int)v;
            break;
        case 'r':
            image_opts = 1;
            o.raw = 1;
            break;
        case 'R':
        case OPT_NO_RESTART:
            if (restart >= 0 && restart != (c == 'R')) {
                fprintf(stderr, "mkbatchfs: --restart and --no-restart exclude each other\n");
                return 2;
            }
            restart = c == 'R';
            break;
        case 's':
            o.strict = 1;
            break;
        case 't':
            if (!strcmp(optarg, "u16") || !strcmp(optarg, "u32"))
                o.tokens = optarg[1] == '1' ? 2 : 4, o.token_format = BFS_DATASET_TOKENS_FLAT;
            else if (!strcmp(optarg, "npy") || !strcmp(optarg, "megatron"))
                o.tokens = 0, o.token_format = optarg[0] == 'n' ? BFS_DATASET_TOKENS_NPY
                                                                : BFS_DATASET_TOKENS_MEGATRON;
            else {
                fprintf(stderr, "mkbatchfs: --tokens: '%s' is not u16, u32, npy or megatron\n",
                        optarg);
                return 2;
            }
            tokens_given = 1;
            break;
        case OPT_OFFSETS:
            o.offsets = optarg;
            break;
        case 'f':
            if (!strcmp(optarg, "webdataset") || !strcmp(optarg, "tfrecord"))
                o.format =
                    optarg[0] == 'w' ? BFS_DATASET_FORMAT_WEBDATASET : BFS_DATASET_FORMAT_TFRECORD;
            else if (!strcmp(optarg, "manifest"))
                o.format = BFS_DATASET_FORMAT_MANIFEST;
            else {
                fprintf(stderr,
                        "mkbatchfs: --format: '%s' is not webdataset, tfrecord or manifest\n",
                        optarg);
                return 2;
            }
            break;
        case OPT_IMAGE_KEY:
        case OPT_LABEL_KEY:
            if (!optarg[0] || strlen(optarg) > 255) {
                fprintf(stderr, "mkbatchfs: %s: a key of 1 to 255 bytes\n",
                        c == OPT_IMAGE_KEY ? "--image-key" : "--label-key");
                return 2;
            }
            *(c == OPT_IMAGE_KEY ? &o.image_key : &o.label_key) = optarg;
            break;
        case OPT_TOKENIZE:
            if (tokenize) {
                fprintf(stderr, "mkbatchfs: one --tokenize per run (run mkbatchfs --tokenize "
                                "again on its output for another field)\n");
                return 2;
            }
            tokenize = optarg;
            break;
        case OPT_FIELD: {
            char why[512];
            if (o.nfields == BFS_DATASET_FIELDS_MAX + 1) {
                fprintf(stderr, "mkbatchfs: --field: at most %u fields and a label\n",
                        BFS_DATASET_FIELDS_MAX);
                return 2;
            }
            if (bfs_dataset_field_parse(optarg, names[o.nfields], sizeof names[o.nfields], why,
                                        sizeof why)) {
                fprintf(stderr, "mkbatchfs: %s\n", why);
                return 2;
            }
            for (size_t k = 0; k < o.nfields; k++)
                if (!strcmp(names[k], names[o.nfields])) {
                    fprintf(stderr, "mkbatchfs: --field %s given twice\n", names[k]);
                    return 2;
                }
            fields[o.nfields] = optarg;
            o.fields = fields;
            o.nfields++;
            break;
        }
        case OPT_IMAGE_ONLY:
            o.image_only = 1;
            break;
        case OPT_DOC_SEP:
            if (parse_int(optarg, "--doc-sep", 0, UINT32_MAX, &doc_sep))
                return 2;
            break;
        case 'p':
            if (parse_size(optarg, &o.page_size))
                return 2;
            break;
        case OPT_NO_FSYNC:
            o.fsync = 0;
            break;
        case OPT_QUIET:
            quiet = 1;
            break;
        case OPT_INFO:
        case OPT_CAT:
        case OPT_VERIFY:
            if (mode && mode != c) {
                fprintf(stderr, "mkbatchfs: --info, --cat and --verify exclude each other\n");
                return 2;
            }
            mode = c;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("mkbatchfs %s (.bfs format versions %u..%u: 1 images, 2 token sequences)\n",
                   BATCHFS_VERSION, BFS_DATASET_VERSION_MIN, BFS_DATASET_VERSION);
            return 0;
        case ':':
            fprintf(stderr, "mkbatchfs: %s needs a value\n\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default: /* '?': our messages (opterr = 0), so that a negative number says why */
            if (optopt >= '0' && optopt <= '9')
                fprintf(stderr,
                        "mkbatchfs: -%c...: negative numbers are not accepted (a sample "
                        "index is 0 or more)\n\n",
                        optopt);
            else if (optopt)
                fprintf(stderr, "mkbatchfs: unknown option -%c\n\n", optopt);
            else
                fprintf(stderr, "mkbatchfs: unknown option %s\n\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    int flat = tokens_given && o.token_format == BFS_DATASET_TOKENS_FLAT;
    if (o.offsets && (!tokens_given || o.token_format != BFS_DATASET_TOKENS_NPY)) {
        fprintf(stderr, "mkbatchfs: --offsets applies only with --tokens npy\n");
        return 2;
    }
    if (tokens_given && o.token_format == BFS_DATASET_TOKENS_NPY && !o.offsets) {
        fprintf(stderr, "mkbatchfs: --tokens npy needs --offsets F, a .npy of the documents' "
                        "starts or boundaries\n");
        return 2;
    }
    if (tokens_given && !flat && doc_sep >= 0) {
        fprintf(stderr, "mkbatchfs: --doc-sep applies only with --tokens u16|u32 (npy and "
                        "megatron files say where documents are)\n");
        return 2;
    }
    if (tokens_given && (o.format || o.image_key || o.label_key || o.nfields || o.image_only)) {
        fprintf(stderr, "mkbatchfs: --tokens packs token ids: --format, --image-key, "
                        "--label-key, --field and --image-only do not apply\n");
        return 2;
    }
    if (tokens_given && (image_opts || restart >= 0)) {
        fprintf(stderr, "mkbatchfs: --tokens packs token ids: --max-side, --quality, --raw, "
                        "--restart and --no-restart do not apply\n");
        return 2;
    }
    if (flat && doc_sep < 0) {
        fprintf(stderr, "mkbatchfs: --tokens needs --doc-sep T, the token that ends each "
                        "document (GPT-2's <|endoftext|> is 50256)\n");
        return 2;
    }
    if (!tokens_given && doc_sep >= 0) {
        fprintf(stderr, "mkbatchfs: --doc-sep applies only with --tokens\n");
        return 2;
    }
    if (o.tokens && o.tokens == 2 && doc_sep > 65535) {
        fprintf(stderr, "mkbatchfs: --doc-sep %ld does not fit in u16 tokens (0..65535)\n",
                doc_sep);
        return 2;
    }
    o.doc_sep = (uint32_t)(doc_sep < 0 ? 0 : doc_sep);
    o.restart = tokens_given ? 0 : restart >= 0 ? restart : !o.raw;
    if (o.raw && restart == 1) {
        fprintf(stderr, "mkbatchfs: --raw stores pixels, not JPEGs: --restart does not apply\n");
        return 2;
    }
    int nargs = argc - optind;
    char **args = argv + optind;
    int want = mode == OPT_CAT ? 2 : mode ? 1 : 2;
    if (nargs != want && !(!mode && !tokens_given && nargs > 2) && /* shards: SRC... OUT */
        !(mode == OPT_CAT && nargs == 3)) {                        /* --cat F I FIELD */
        fprintf(stderr, "mkbatchfs: expected %d argument%s, got %d\n\n", want, want == 1 ? "" : "s",
                nargs);
        usage(stderr);
        return 2;
    }
    if (tokenize && (mode || tokens_given)) {
        fprintf(stderr, "mkbatchfs: --tokenize adds a tokens field to a dataset with captions: "
                        "not with --info, --cat, --verify or --tokens\n");
        return 2;
    }
    if (tokenize)
        return cmd_tokenize(tokenize, (const char *const *)args, (size_t)nargs - 1, args[nargs - 1],
                            &o, quiet);
    switch (mode) {
    case OPT_INFO:
        return bfs_dataset_describe("mkbatchfs", args[0], stdout, stderr) ? 1 : 0;
    case OPT_CAT:
        return cmd_cat(args[0], args[1], nargs == 3 ? args[2] : NULL);
    case OPT_VERIFY:
        return bfs_dataset_verify("mkbatchfs", args[0], stdout, stderr) ? 1 : 0;
    default:
        return cmd_pack((const char *const *)args, (size_t)nargs - 1, args[nargs - 1], &o, quiet);
    }
}
