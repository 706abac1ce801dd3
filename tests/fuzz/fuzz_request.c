/* fuzz_request.c — libFuzzer target over the API server's request parsing
 * and conversion (JSON body -> protocol parser -> internal conversation ->
 * rendered prompt) and its output conversion (model text -> output parser ->
 * each protocol's stream events and body), through srv_fuzz_one, the entry
 * point the unit tests also replay the seed corpus through.
 *   make fuzz                      (FUZZ_TIME=60 seconds by default)
 * Input layout: see srv_fuzz_one in src/server/srv_internal.h. */
#include <stddef.h>
#include <stdint.h>

#include "server/srv_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    srv_fuzz_one(data, size);
    return 0;
}
