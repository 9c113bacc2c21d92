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
#include <cpuid.h>
#include <immintrin.h>

#define FOLDED_CRC 1

/* Whether the CPU has what the folded CRC (PCLMULQDQ, SSE4.1) or the SHA extensions (SHA, SSSE3,
 * SSE4.1) need, from CPUID itself: leaf 1's ECX (bits 1, 9, 19) and leaf 7's EBX (bit 29). Not
 * __builtin_cpu_supports, whose feature names differ between compilers (clang 14 has no "sha"). */
static int cpu_has(int sha) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 19 & 1))
        return 0;
    if (!sha)
        return c >> 1 & 1;
    if (!(c >> 9 & 1) || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return b >> 29 & 1;
}

/* x moved ahead by the distance of the constants k (x's low half times k's low, its high half
 * times k's high), with the block `next` added: one fold. */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

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
            lane[i] = fold(lane[i], by512, _mm_loadu_si128((const __m128i *)(p + 16 * i)));
    __m128i x = lane[0];
    for (int i = 1; i < 4; i++) /* the lanes into one */
        x = fold(x, by128, lane[i]);
    for (; n >= 16; p += 16, n -= 16) /* blocks past the last four */
        x = fold(x, by128, _mm_loadu_si128((const __m128i *)p));
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, by128, 0x10)); /* 128 bits to 64 */
    x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, low32s), by64, 0x00)); /* to 32 */
    __m128i q = _mm_clmulepi64_si128(_mm_and_si128(x, low32s), barrett, 0x10);
    x = _mm_xor_si128(x, _mm_clmulepi64_si128(_mm_and_si128(q, low32s), barrett, 0x00));
    return (uint32_t)_mm_extract_epi32(x, 1);
}
#endif

uint32_t crc32_with(const unsigned char *p, Py_ssize_t n, int generic) {
    if (table[0][1] == 0)
        crc_tables(); /* once: the GIL serialises the first calls */
    uint32_t c = 0xFFFFFFFFu;
#ifdef FOLDED_CRC
    static int folds = -1;
    if (folds < 0)
        folds = cpu_has(0);
    if (folds && !generic && n >= 64) {
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

/* SHA-256 (FIPS 180-4) of a's bytes then b's, for a hashed column (a salt, then a value's text):
 * 64-byte blocks through the CPU's SHA extensions where it has them (checked at run time), else
 * in C. tests/test_columns_compiled.py holds both to hashlib. */
static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha_blocks_c(uint32_t h[8], const unsigned char *p, Py_ssize_t blocks) {
    for (; blocks > 0; blocks--, p += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ w[i - 15] >> 3;
            uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ w[i - 2] >> 10;
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
            uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SHA_EXTENSIONS 1

/* The same with SHA-NI: the state as two lanes (ABEF, CDGH), four rounds a step (two
 * sha256rnds2), each step's four message words made from the four before (sha256msg1, msg2). */
__attribute__((target("sha,ssse3,sse4.1"))) static void sha_blocks_ni(uint32_t h[8], const unsigned char *p,
                                                                      Py_ssize_t blocks) {
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL); /* big-endian words */
    __m128i cdab = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)h), 0xB1);
    __m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(h + 4)), 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, hgfe, 8), cdgh = _mm_blend_epi16(hgfe, cdab, 0xF0);
    for (; blocks > 0; blocks--, p += 64) {
        __m128i saved_abef = abef, saved_cdgh = cdgh, w[4];
        for (int i = 0; i < 4; i++)
            w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), swap);
        for (int g = 0; g < 16; g++) { /* rounds 4g..4g+3; w[g & 3] holds words 4g..4g+3 */
            if (g >= 4) {
                __m128i before = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
                before = _mm_add_epi32(before, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
                w[g & 3] = _mm_sha256msg2_epu32(before, w[(g + 3) & 3]);
            }
            __m128i words = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *)(sha_k + 4 * g)));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, words);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(words, 0x0E));
        }
        abef = _mm_add_epi32(abef, saved_abef);
        cdgh = _mm_add_epi32(cdgh, saved_cdgh);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B), dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)h, _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)(h + 4), _mm_alignr_epi8(dchg, feba, 8));
}
#endif

static void sha_blocks(uint32_t h[8], const unsigned char *p, Py_ssize_t blocks, int generic) {
#ifdef SHA_EXTENSIONS
    static int extensions = -1;
    if (extensions < 0)
        extensions = cpu_has(1);
    if (extensions && !generic) {
        sha_blocks_ni(h, p, blocks);
        return;
    }
#endif
    sha_blocks_c(h, p, blocks);
}

void sha256_hex(const unsigned char *a, Py_ssize_t na, const unsigned char *b, Py_ssize_t nb, char hex[64],
                int generic) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    unsigned char block[128];
    Py_ssize_t filled = 0, total = na + nb;
    for (int part = 0; part < 2; part++) { /* whole blocks straight from the input, the rest gathered */
        const unsigned char *p = part ? b : a;
        Py_ssize_t n = part ? nb : na;
        if (filled > 0) {
            Py_ssize_t take = n < 64 - filled ? n : 64 - filled;
            memcpy(block + filled, p, (size_t)take);
            filled += take, p += take, n -= take;
            if (filled == 64)
                sha_blocks(h, block, 1, generic), filled = 0;
        }
        if (n >= 64) {
            sha_blocks(h, p, n / 64, generic);
            p += n / 64 * 64, n %= 64;
        }
        memcpy(block + filled, p, (size_t)n);
        filled += n;
    }
    /* the padding: a one bit, zeros, the length in bits (big-endian), in one block or two */
    Py_ssize_t padded = filled < 56 ? 64 : 128;
    block[filled] = 0x80;
    memset(block + filled + 1, 0, (size_t)(padded - filled - 1));
    uint64_t bits = (uint64_t)total * 8;
    for (int i = 0; i < 8; i++)
        block[padded - 8 + i] = (unsigned char)(bits >> (56 - 8 * i));
    sha_blocks(h, block, padded / 64, generic);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        hex[2 * i] = digits[byte >> 4], hex[2 * i + 1] = digits[byte & 15];
    }
}
