/* outp_test.h — what the two output-parser test files share: a collector
 * that records one parse's events into a comparable result (checking the
 * event protocol as it goes), the chunking modes, and DSML spelling macros. */
#ifndef DI_OUTP_TEST_H
#define DI_OUTP_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe/output_parser.h"

const char *outpt_str(const di_buf *b);

#define OUTPT_MAX_CALLS 128
typedef struct outpt_call {
    char *name, id[64];
    di_buf args;
    bool ended, complete;
} outpt_call;

typedef struct outpt_res {
    di_buf reasoning, text, errors;
    outpt_call calls[OUTPT_MAX_CALLS];
    int n_calls, open_call;
    int stop_index, n_stop_events, n_finish;
    bool stopped; /* outp_feed returned 1 */
    outp_summary sum;
    char bad[DI_ERR_LEN]; /* first protocol violation seen by the callback */
} outpt_res;

/* An empty result, ready for outpt_event. */
outpt_res *outpt_fresh(outpt_res *r);
void outpt_res_free(outpt_res *r);
/* outp_event_fn recording into the outpt_res ctx. */
void outpt_event(void *ctx, const outp_event *ev);
/* Parses in[0..n) cut at cuts[] (ascending, inside (0, n)) with id_seed 42. */
void outpt_parse(const outp_config *cfg, const char *in, size_t n, const size_t *cuts,
                 size_t n_cuts, outpt_res *r);
/* "" if equal, else what differs. */
const char *outpt_diff(const outpt_res *a, const outpt_res *b);
uint64_t outpt_rng(uint64_t *state);

/* Parses `in` whole, byte by byte, split in two at every position (or at
 * about 32 positions unless every_split) and in n_random random chunkings;
 * returns "" or why a parse broke the protocol, differed from the whole
 * parse, or (check != NULL) the whole parse failed check(ctx, whole). */
typedef const char *(*outpt_check_fn)(const void *ctx, const outpt_res *whole);
const char *outpt_all_modes(const outp_config *cfg, const char *in, bool every_split,
                            outpt_check_fn check, const void *ctx, int n_random, uint64_t seed);

#define OUTPT_FEED(p, s, r) outp_feed(p, s, strlen(s), outpt_event, r)

#define D        "｜DSML｜"
#define TC_OPEN  "<" D "tool_calls>"
#define TC_CLOSE "</" D "tool_calls>"
#define INV(n)   "<" D "invoke name=\"" n "\">"
#define INV_END  "</" D "invoke>"
#define PS(k, v) "<" D "parameter name=\"" k "\" string=\"true\">" v "</" D "parameter>"
#define PJ(k, v) "<" D "parameter name=\"" k "\" string=\"false\">" v "</" D "parameter>"
/* V4.1: `calls` block tag and a space before every inner tag name. */
#define C1_OPEN   "<" D " calls>"
#define C1_CLOSE  "</" D " calls>"
#define INV1(n)   "<" D " invoke name=\"" n "\">"
#define INV1_END  "</" D " invoke>"
#define PS1(k, v) "<" D " parameter name=\"" k "\" string=\"true\">" v "</" D " parameter>"
#define PJ1(k, v) "<" D " parameter name=\"" k "\" string=\"false\">" v "</" D " parameter>"

#define WEATHER                                                                                    \
    TC_OPEN "\n" INV("get_weather") "\n" PS("city", "Paris") "\n" PJ("days", "3") "\n" INV_END     \
                                                                                  "\n" TC_CLOSE
#define WEATHER_ARGS "{\"city\": \"Paris\", \"days\": 3}"

#define N10  "名名名名名名名名\n名"
#define N100 N10 N10 N10 N10 N10 N10 N10 N10 N10 N10
#define N300 N100 N100 N100

#define STOPS(...)                                                                                 \
    .stops = (const char *const[]){__VA_ARGS__},                                                   \
    .n_stops = sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)

#endif
