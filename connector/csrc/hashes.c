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

/* CRC-32 (ISO-HDLC, zlib's: reflected 0xEDB88320). On x86-64 with carry-less multiply, 16-byte
 * blocks are folded four lanes at a time (Intel's "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ"); the bytes around them, and every byte elsewhere, go eight a step through
 * tables (slice-by-8). tests/test_crc_native.py holds the result to zlib's. */
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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define FOLDED_CRC 1

/* The CRC state `c` (inverted, as the table loop keeps it) after n bytes at p, n a multiple of
 * 16 and at least 64. The constants are powers of x modulo P, bit-reflected: multiplying a lane
 * by a pair of them moves it 512 bits (four lanes) or 128 bits (one) ahead; then 128 bits are
 * folded to 64 and to 32, and reduced (Barrett) by P and its quotient x^64 / P. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_folded(uint32_t c, const unsigned char *p, Py_ssize_t n) {
    const __m128i by512 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4), by128 = _mm_set_epi64x(0xccaa009e, 0x1751997d0);
    const __m128i by64 = _mm_set_epi64x(0, 0x163cd6124), barrett = _mm_set_epi64x(0x1f7011641, 0x1db710641);
    const __m128i low32s = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i lane[4];
    for (int i = 0; i < 4; i++)
        lane[i] = _mm_loadu_si128((const __m128i *)(p + 16 * i));
    lane[0] = _mm_xor_si128(lane[0], _mm_cvtsi32_si128((int)c));
    p += 64, n -= 64;
    for (; n >= 64; p += 64, n -= 64) /* each lane moved 512 bits on, the next block added */
        for (int i = 0; i < 4; i++)
            lane[i] = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lane[i], by512, 0x00),
                                                  _mm_clmulepi64_si128(lane[i], by512, 0x11)),
                                    _mm_loadu_si128((const __m128i *)(p + 16 * i)));
    __m128i x = lane[0];
    for (int i = 1; i < 4; i++) /* the lanes into one */
        x = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, by128, 0x00), _mm_clmulepi64_si128(x, by128, 0x11)),
                          lane[i]);
    for (; n >= 16; p += 16, n -= 16) /* blocks past the last four */
        x = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, by128, 0x00), _mm_clmulepi64_si128(x, by128, 0x11)),
                          _mm_loadu_si128((const __m128i *)p));
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, by128, 0x10)); /* 128 bits to 64 */
    x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, low32s), by64, 0x00)); /* to 32 */
    __m128i q = _mm_clmulepi64_si128(_mm_and_si128(x, low32s), barrett, 0x10);
    x = _mm_xor_si128(x, _mm_clmulepi64_si128(_mm_and_si128(q, low32s), barrett, 0x00));
    return (uint32_t)_mm_extract_epi32(x, 1);
}
#endif

uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    if (table[0][1] == 0)
        crc_tables(); /* once: the GIL serialises the first calls */
    uint32_t c = 0xFFFFFFFFu;
#ifdef FOLDED_CRC
    static int folds = -1;
    if (folds < 0)
        folds = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    if (folds && n >= 64) {
        Py_ssize_t blocks = n & ~(Py_ssize_t)15;
        c = crc_folded(c, p, blocks);
        p += blocks;
        n -= blocks;
    }
#endif
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
