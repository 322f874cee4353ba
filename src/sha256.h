/* SHA-256 (FIPS 180-4), used to record the provenance of the text files a
 * dataset was prepared from (and to verify downloads against input/). */
#ifndef SHA256_H
#define SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t n_bytes;
    unsigned char buf[64];
    size_t n_buf;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
void sha256_final(Sha256 *s, unsigned char digest[32]);
/* lower-case hex of the digest of data[0..n): hex needs 65 bytes */
void sha256_hex(const void *data, size_t n, char hex[65]);

#endif
