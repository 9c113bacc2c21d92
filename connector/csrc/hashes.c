/* Kafka's murmur2 and the binlog's CRC-32, for the kernel and the router. */
#include "native.h"

/* org.apache.kafka.common.utils.Utils.murmur2, unsigned (connector/sink/partitioning.murmur2 is
 * the Python reference; tests/test_transcode.py holds them equal). */
uint32_t murmur2(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = MURMUR2_M;
    uint32_t h = MURMUR2_SEED ^ (uint32_t)length;
    Py_ssize_t whole = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)le(data + i, 4);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* CRC-32 (ISO-HDLC, zlib's: reflected 0xEDB88320), eight bytes a step (slice-by-8). */
static uint32_t table[8][256];

static void crc_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int s = 1; s < 8; s++)
            table[s][n] = table[0][table[s - 1][n] & 0xFF] ^ (table[s - 1][n] >> 8);
}

uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    if (table[0][1] == 0)
        crc_tables(); /* once: the GIL serialises the first calls */
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ (uint32_t)le(p, 4), hi = (uint32_t)le(p + 4, 4);
        c = table[7][lo & 0xFF] ^ table[6][lo >> 8 & 0xFF] ^ table[5][lo >> 16 & 0xFF] ^ table[4][lo >> 24] ^
            table[3][hi & 0xFF] ^ table[2][hi >> 8 & 0xFF] ^ table[1][hi >> 16 & 0xFF] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
