/*
 * folder.h — scan an ImageFolder directory: the dataset order shared by mkbatchfs (which
 * packs it) and the engine's directory source (which reads it in place).
 *
 * Order follows torchvision.datasets.ImageFolder: classes = sub-directories of the root
 * sorted by name (byte-wise), labels 0..C-1 in that order; samples = the files below a
 * class directory in the order of sorted(os.walk(class_dir)) with sorted file names whose
 * names end in .jpg, .jpeg, .png or .webp, any case (torchvision picks images by extension
 * too; batchfs decodes JPEG, PNG and WebP only, so the other image extensions it accepts,
 * .bmp, .ppm, .tif..., are not samples here; what a file holds is told by its content, so
 * a JPEG named .png is a JPEG sample). Names
 * starting with '.' are ignored (torchvision would count a hidden directory, such as
 * .ipynb_checkpoints, as a class: hidden_dirs tells). Files beside the class directories
 * are ignored. Files are not opened: whether a .jpg is a JPEG, or a readable regular file
 * at all (a dangling symlink, a FIFO), is the reader's business, so the packer and the
 * mount agree on the samples of any folder. A directory below the root that cannot be
 * listed (permissions, I/O error) is skipped and counted (unreadable_dirs): its files are
 * not samples, and a class directory that cannot be listed is a class without samples;
 * the notes say so, and the sample list (hence the fingerprint) shows it. Directory
 * links are followed (torchvision walks with followlinks=True), except that a link back
 * to a directory on its own path (a loop, which torchvision would follow until paths
 * overflow) fails the scan with -ELOOP, as do more than 64 directory levels.
 */
#ifndef BATCHFS_ENGINE_DATASET_FOLDER_H
#define BATCHFS_ENGINE_DATASET_FOLDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_folder {
    char **paths;     /* n full paths ("ROOT/class/.../file") */
    uint32_t *labels; /* n labels */
    uint64_t n, cap;
    char **classes; /* class names (directory names) */
    uint32_t nclasses, class_cap;
    uint64_t ignored;         /* files below class directories not named as images */
    char *ignored_example;    /* the first of them (full path), or NULL */
    uint32_t hidden_dirs;     /* hidden directories beside the class directories */
    char *hidden_example;     /* the first of them (name), or NULL */
    uint32_t unreadable_dirs; /* directories below the root that could not be listed */
    char *unreadable_example; /* the first of them (full path), or NULL */
    int unreadable_err;       /* its error (negative errno) */
} bfs_folder;

/*
 * bfs_folder_scan - list root. Returns 0; -ENOENT / -ENOTDIR / -EACCES for the root;
 * -ELOOP for a directory link loop below a class directory (err names the link);
 * BFS_E_EMPTY when there is no class directory or a readable class directory holds no
 * .jpg/.jpeg/.png/.webp file, or no sample at all was found; -ENOMEM. err names the directory. On
 * failure f is left empty.
 */
int bfs_folder_scan(const char *root, bfs_folder *f, char *err, size_t errlen);

/* bfs_folder_free - release f's lists and zero it; accepts NULL or an empty folder. */
void bfs_folder_free(bfs_folder *f);

/* bfs_folder_is_image_name - does name end in .jpg, .jpeg, .png or .webp (any case)? */
int bfs_folder_is_image_name(const char *name);

/*
 * bfs_folder_notes - what a user should know about f's scan, as lines ending in '\n' (files
 * that are not samples, hidden directories that torchvision would count as classes,
 * directories that could not be listed), or ""
 * when nothing; written to buf (truncated to len).
 */
void bfs_folder_notes(const bfs_folder *f, char *buf, size_t len);

#endif
