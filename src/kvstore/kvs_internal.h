/* kvs_internal.h — what the store's own files share: the block file format
 * (store.c), the kvs handle (kvstore.c) and the job queues the fetch threads
 * (fetch.c) work from. Nothing outside src/kvstore/ includes this. */
#ifndef DI_KVS_INTERNAL_H
#define DI_KVS_INTERNAL_H

#include <pthread.h>

#include "kvstore/kvs_index.h"
#include "kvstore/kvstore.h"

/* --- block files (store.c) ------------------------------------------------ */
#define KVS_MAGIC       "DIKVBLK"
#define KVS_HDR_BYTES   64
#define KVS_TMP_STALE_S 900.0 /* temporary files older than this are a crashed writer's */

typedef enum {
    KVS_READ_OK = 0,
    KVS_READ_MISSING,   /* no such file (never written, or evicted) */
    KVS_READ_TRUNCATED, /* size differs from the layout's */
    KVS_READ_FOREIGN,   /* magic, version, fingerprint, key or layout differ */
    KVS_READ_CORRUPT,   /* checksum mismatch */
    KVS_READ_TOKENS,    /* other tokens under the same key (64-bit collision) */
    KVS_READ_IO,        /* read error */
} kvs_read_status;

/* A block file's image: header, tokens at KVS_TOK_OFF, payload at
 * KVS_PAYLOAD_OFF (64-byte aligned in a 64-byte aligned image). */
#define KVS_TOK_OFF     KVS_HDR_BYTES
#define KVS_PAYLOAD_OFF (KVS_HDR_BYTES + KVS_BLOCK_TOKENS * 4)
#define KVS_IO_ALIGN    4096
/* Bytes of one block file, and of a buffer that can take it by O_DIRECT
 * (rounded up to KVS_IO_ALIGN; the buffer KVS_IO_ALIGN-aligned). */
size_t kvs_file_bytes(const kvs_layout *lay);
size_t kvs_file_cap(const kvs_layout *lay);
/* root/xx/<16 hex>.kvb, xx = the key's top byte. */
void kvs_file_path(char *buf, size_t n, const char *root, uint64_t key);
/* Writes the block crash-safely (temporary file in the same directory,
 * optional fdatasync, rename). file: a kvs_file_bytes image with the tokens
 * and payload in place; the header is filled in here. direct (when sync is
 * not KVS_SYNC_NONE): O_DIRECT where the filesystem allows, file then being a
 * KVS_IO_ALIGN-aligned buffer of kvs_file_cap bytes. -1 with err naming the
 * path on failure. */
int kvs_file_write(const char *root, const kvs_layout *lay, uint64_t key, uint64_t parent, int cls,
                   kvs_sync sync, bool direct, void *file, di_err *err);
/* Reads and verifies a block's whole image into file (the payload is at
 * KVS_PAYLOAD_OFF). direct: O_DIRECT when the filesystem allows (file then
 * KVS_IO_ALIGN-aligned with kvs_file_cap bytes), else kvs_file_bytes will do.
 * want_tokens may be NULL. *cls gets the stored class. When touch_older_s
 * >= 0 and the file's last use is older than that, its mtime is set to now
 * (last use). */
kvs_read_status kvs_file_read(const char *root, const kvs_layout *lay, uint64_t key,
                              const int32_t *want_tokens, void *file, bool direct, int *cls,
                              double touch_older_s);
/* The class stored in a block's header, or KVS_CLASS_UNKNOWN. */
int kvs_file_read_class(const char *root, const kvs_layout *lay, uint64_t key);
/* Size and mtime of a block file; false if missing. */
bool kvs_file_stat(const char *root, uint64_t key, uint64_t *bytes, double *mtime);
/* Calls fn for every block file under root; removes temporary files older
 * than KVS_TMP_STALE_S. Returns the number of files seen. */
long long kvs_scan(const char *root,
                   void (*fn)(void *ctx, uint64_t key, uint64_t bytes, double mtime), void *ctx);
/* Wall-clock seconds (file times are wall-clock). */
double kvs_wall(void);
const char *kvs_read_status_name(kvs_read_status s);

/* --- the handle (kvstore.c) ------------------------------------------------ */
typedef struct kvs_wjob {
    uint64_t key, parent;
    int cls;
    void *file; /* staging buffer: the file image with tokens and payload in place */
} kvs_wjob;

typedef struct kvs_fjob {
    kvs_fetch *f;
    int i;
} kvs_fjob;

struct kvs {
    char *root;
    kvs_layout lay; /* layer arrays owned */
    kvs_opts o;
    double min_ttl;

    pthread_mutex_t mu; /* everything below */
    kvs_index *ix;
    kvs_stats st;

    /* writer threads */
    pthread_t *writers;
    pthread_cond_t wcond, widle;
    kvs_wjob *wq;
    int wq_head, wq_n;
    int n_writing; /* jobs being written */
    bool stop;
    double last_scan;

    /* host staging buffers, reused last-in first-out: a buffer touched
     * moments ago is much cheaper to fill than fresh or long-idle memory
     * (page faults, and on a VM the host's own paging) */
    void **bufs;
    int n_bufs;

    /* fetch threads */
    pthread_t *fth;
    int n_fth;
    pthread_cond_t fcond;
    kvs_fjob *fq;
    int fq_head, fq_n, fq_cap;
};

/* kvstore.c: a file-image host buffer (kvs_file_bytes) from the staging pool (allocated
 * when the pool is empty), and its return (freed beyond host_blocks). */
void *kvs_buf_get(kvs *s);
void kvs_buf_put(kvs *s, void *buf);
/* fetch.c: the fetch threads' loop, and a fetch's geometry for swapin.c. */
void *kvs_fetch_main(void *arg);
const kvs_layout *kvs_fetch_layout(const kvs_fetch *f);
int kvs_fetch_count(const kvs_fetch *f);
/* kvstore.c: records a block read (latency, bytes, index update). Called
 * with s->mu held. */
void kvs_note_read(kvs *s, uint64_t key, kvs_read_status st, int cls, double seconds);

#endif
