/* resp_store.h — stored Responses API responses (previous_response_id,
 * GET / DELETE /v1/responses/ID), bounded in bytes, least recently used
 * first out. Thread-safe. */
#ifndef DI_RESP_STORE_H
#define DI_RESP_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

typedef struct resp_store resp_store;

resp_store *resp_store_new(size_t max_bytes);
/* The same, each response also kept as a file in dir (made if missing),
 * those already there loaded back (oldest first out), so that
 * conversations outlive a restart; NULL with err where dir cannot be
 * used. dir NULL: resp_store_new. */
resp_store *resp_store_open(size_t max_bytes, const char *dir, di_err *err);
void resp_store_free(resp_store *s);
/* Keeps response (a Responses object) under id: made from input (the
 * request's own items, an array) continuing prev (NULL: none). A response
 * larger than the whole store is not kept. */
void resp_store_put(resp_store *s, const char *id, const char *prev, const json_t *input,
                    const json_t *response);
/* The items response id continues from: each stored turn's input items
 * then its output items, oldest first (a new array); without own_output,
 * id's own output left out (the items that made it). NULL when id, or a
 * response it continued, is not stored (unknown, evicted, deleted). */
json_t *resp_store_history(resp_store *s, const char *id, bool own_output);
/* The stored response (a new reference), or NULL. */
json_t *resp_store_get(resp_store *s, const char *id);
/* Removes it; false when it was not stored. */
bool resp_store_delete(resp_store *s, const char *id);

#endif
