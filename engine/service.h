/*
 * service.h — the composition root's internal side: the parts of a service, for the
 * engine's own tests. What the fronts use (bfs_service_open, _start, _close, /stats, ...)
 * is declared in engine/api.h; the service is written in engine/service.c.
 */
#ifndef BATCHFS_ENGINE_SERVICE_H
#define BATCHFS_ENGINE_SERVICE_H

#include "engine/api.h"
#include "engine/engine.h"
#include "engine/exec.h"

/* The parts: the engine, and the executor (NULL before start). */
bfs_engine *bfs_service_engine(bfs_service *s);
bfs_exec *bfs_service_exec(bfs_service *s);

#endif
