/*
 * folder.h — scan an ImageFolder directory: the dataset order shared by mkbatchfs (which
 * packs it) and the engine's directory source (which reads it in place).
 *
 * Order follows torchvision.datasets.ImageFolder: classes = sub-directories of the root
 * sorted by name (byte-wise), labels 0..C-1 in that order; samples = every file below a
 * class directory in the order of sorted(os.walk(class_dir)) with sorted file names.
 * Names starting with '.' are ignored. Files beside the class directories are ignored.
 * Files are not opened: deciding what is an image is the reader's job.
 */
#ifndef BATCHFS_ENGINE_FOLDER_H
#define BATCHFS_ENGINE_FOLDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_folder {
    char **paths;     /* n full paths ("ROOT/class/.../file") */
    uint32_t *labels; /* n labels */
    uint64_t n, cap;
    char **classes; /* class names (directory names) */
    uint32_t nclasses, class_cap;
} bfs_folder;

/*
 * bfs_folder_scan - list root. Returns 0; -ENOENT / -ENOTDIR / -EACCES for the root;
 * BFS_E_EMPTY when there is no class directory or a class directory holds no file;
 * -ENOMEM. err names the directory. On failure f is left empty.
 */
int bfs_folder_scan(const char *root, bfs_folder *f, char *err, size_t errlen);

/* bfs_folder_free - release f's lists and zero it; accepts NULL or an empty folder. */
void bfs_folder_free(bfs_folder *f);

#endif
