/* version.h — the batchfs release version, shared by every program. */
#ifndef BATCHFS_ENGINE_VERSION_H
#define BATCHFS_ENGINE_VERSION_H
#define BATCHFS_VERSION "0.1.0"
#endif
