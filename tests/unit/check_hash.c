/* Unit tests for the key hashes: twemproxy's values, published vectors, signed-char quirks. */
#include "config.h"

#include "check_main.h"
#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"
#include "hash/jenkins.h"

#define S(lit) (lit), (sizeof(lit) - 1)

/* The twelve twemproxy hashes of "apple", read from nutcracker 0.5.0 (vectors README). */
START_TEST(test_twemproxy_apple)
{
    static const struct { enum hash_type t; uint32_t v; } want[] = {
        { HASH_ONE_AT_A_TIME, 2297466611u }, { HASH_MD5, 3195025439u },
        { HASH_CRC16, 3662830516u },         { HASH_CRC32, 10542u },
        { HASH_CRC32A, 2838417488u },        { HASH_FNV1_32, 67176023u },
        { HASH_FNV1A_32, 280767167u },       { HASH_FNV1_64, 473199127u },
        { HASH_FNV1A_64, 1488911807u },      { HASH_HSIEH, 3738850110u },
        { HASH_JENKINS, 1442444624u },       { HASH_MURMUR, 4142305122u },
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        uint64_t got = hash_compute(want[i].t, 0, S("apple"));
        ck_assert_msg(got == want[i].v, "%s(apple) = %llu, want %u", hash_name(want[i].t),
                      (unsigned long long)got, want[i].v);
        /* the twemproxy hashes ignore the seed */
        ck_assert_uint_eq(hash_compute(want[i].t, 12345, S("apple")), got);
    }
}
END_TEST

START_TEST(test_crc_published)
{
    ck_assert_uint_eq(hash_crc32a(S("123456789")), 0xcbf43926u);
    /* twemproxy's crc32 keeps bits 16..30 of the same CRC */
    ck_assert_uint_eq(hash_crc32(S("123456789")), (0xcbf43926u >> 16) & 0x7fff);
    ck_assert_uint_le(hash_crc32(S("apple")), 0x7fff);
    /* crc16 is XMODEM in its low 16 bits ... */
    ck_assert_uint_eq(hash_crc16(S("123456789")) & 0xffff, 0x31c3);
    /* ... but the accumulator is never masked: bits above 15 survive */
    ck_assert_uint_gt(hash_crc16(S("123456789")), 0xffff);
    ck_assert_uint_eq(hash_crc32a("", 0), 0);
}
END_TEST

START_TEST(test_fnv_published)
{
    /* FNV reference vectors (64-bit ones truncated to their low 32 bits) */
    ck_assert_uint_eq(hash_fnv1_32(S("a")), 0x050c5d7eu);
    ck_assert_uint_eq(hash_fnv1a_32(S("a")), 0xe40c292cu);
    ck_assert_uint_eq(hash_fnv1_64(S("a")), 0x8601b7beu);
    ck_assert_uint_eq(hash_fnv1a_64(S("a")), 0x8601ec8cu);
    ck_assert_uint_eq(hash_fnv1_32(S("foobar")), 0x31f0b262u);
    ck_assert_uint_eq(hash_fnv1a_32(S("foobar")), 0xbf9cf968u);
    ck_assert_uint_eq(hash_fnv1_64(S("foobar")), 0xa4dda9c2u);
    ck_assert_uint_eq(hash_fnv1a_64(S("foobar")), 0xf73967e8u);
    /* empty key: the offset basis */
    ck_assert_uint_eq(hash_fnv1a_32("", 0), 0x811c9dc5u);
    ck_assert_uint_eq(hash_fnv1a_64("", 0), 0x84222325u);
}
END_TEST

START_TEST(test_md5_rfc1321)
{
    /* first four digest bytes, little-endian: d41d8cd9..., 90015098..., f96b697d... */
    ck_assert_uint_eq(hash_md5("", 0), 0xd98c1dd4u);
    ck_assert_uint_eq(hash_md5(S("abc")), 0x98500190u);
    ck_assert_uint_eq(hash_md5(S("message digest")), 0x7d696bf9u);
}
END_TEST

START_TEST(test_lookup3_published)
{
    /* the driver values printed by Bob Jenkins' lookup3.c */
    ck_assert_uint_eq(hash__lookup3("", 0, 0), 0xdeadbeefu);
    ck_assert_uint_eq(hash__lookup3("", 0, 0xdeadbeef), 0xbd5b7ddeu);
    ck_assert_uint_eq(hash__lookup3(S("Four score and seven years ago"), 0), 0x17770551u);
    ck_assert_uint_eq(hash__lookup3(S("Four score and seven years ago"), 1), 0xcd628161u);
    ck_assert_uint_eq(hash_jenkins(S("apple")), hash__lookup3(S("apple"), 13));
}
END_TEST

START_TEST(test_one_at_a_time_published)
{
    ck_assert_uint_eq(hash_one_at_a_time(S("a")), 0xca2e9442u);
    ck_assert_uint_eq(hash_one_at_a_time(S("The quick brown fox jumps over the lazy dog")),
                      0x519e91f5u);
    ck_assert_uint_eq(hash_one_at_a_time("", 0), 0);
}
END_TEST

START_TEST(test_xxh_published)
{
    /* xxHash's documented values of the empty input, seed 0 */
    ck_assert(hash_xxh64(0, "", 0) == 0xef46db3751d8e999ULL);
    ck_assert(hash_xxh3(0, "", 0) == 0x2d06800538d394c2ULL);
    ck_assert(hash_compute(HASH_XXH64, 0, "", 0) == 0xef46db3751d8e999ULL);
    ck_assert(hash_compute(HASH_XXH3, 0, "", 0) == 0x2d06800538d394c2ULL);
    /* the seed matters for the seedable hashes */
    ck_assert(hash_compute(HASH_XXH3, 1, S("apple")) != hash_compute(HASH_XXH3, 2, S("apple")));
    ck_assert(hash_compute(HASH_XXH64, 1, S("apple")) != hash_compute(HASH_XXH64, 2, S("apple")));
    ck_assert(hash_compute(HASH_MURMUR3, 1, S("apple")) !=
              hash_compute(HASH_MURMUR3, 2, S("apple")));
}
END_TEST

START_TEST(test_murmur3_published)
{
    /* MurmurHash3_x64_128, first 64-bit half, seed 0 (reference vectors) */
    ck_assert(hash_murmur3(0, "", 0) == 0);
    ck_assert(hash_murmur3(0, S("hello")) == 0xcbd8a7b341bd9b02ULL);
    ck_assert(hash_murmur3(0, S("hello, world")) == 0x342fac623a5ebc8eULL);
    ck_assert(hash_murmur3(0, S("19 Jan 2038 at 3:14:07 AM")) == 0xb89e5988b737affcULL);
    ck_assert(hash_murmur3(0, S("The quick brown fox jumps over the lazy dog.")) ==
              0xcd99481f9ee902c9ULL);
}
END_TEST

/*
 * Bytes >= 0x80 enter one_at_a_time, the fnv family and hsieh's 3-byte tail
 * sign-extended, as twemproxy's `char` arithmetic does on x86-64.  Expected
 * values were computed independently (Python) from that rule; the unsigned
 * variant of fnv1a_32("\xe9") would be 0x6c0b6c44.
 */
START_TEST(test_signed_char_bytes)
{
    ck_assert_uint_eq(hash_fnv1a_32(S("\xe9")), 0xebf38b44u);
    ck_assert_uint_ne(hash_fnv1a_32(S("\xe9")), 0x6c0b6c44u);
    ck_assert_uint_eq(hash_fnv1_32(S("\xe9")), 0xfaf3a2f6u);
    ck_assert_uint_eq(hash_fnv1_64(S("\xe9")), 0x79fe4836u);
    ck_assert_uint_eq(hash_fnv1a_64(S("\xe9")), 0x79fe2ea4u);
    ck_assert_uint_eq(hash_one_at_a_time(S("\xe9")), 0x409848ffu);
    /* "é" is c3 a9 in UTF-8 */
    ck_assert_uint_eq(hash_one_at_a_time(S("\xc3\xa9")), 0x019148aeu);
    ck_assert_uint_eq(hash_fnv1a_64(S("\xc3\xa9")), 0xb4cc3001u);
    ck_assert_uint_eq(hash_hsieh(S("\xc3\xa9")), 0xbeea177bu);
    /* hsieh: third tail byte signed, single tail byte unsigned */
    ck_assert_uint_eq(hash_hsieh(S("ab\xe9")), 0x125794e5u);
    ck_assert_uint_eq(hash_hsieh(S("\xe9")), 0x3c20d7bau);
    /* "ключ:1" */
    ck_assert_uint_eq(hash_fnv1a_64(S("\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87:1")), 0xf04c76d0u);
    ck_assert_uint_eq(hash_one_at_a_time(S("\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87:1")), 0xa4dd9cb3u);
}
END_TEST

/* The functions on the empty key (placement maps an empty key to hash 0 in ring_key_hash). */
START_TEST(test_empty_key)
{
    ck_assert_uint_eq(hash_hsieh("", 0), 0);
    ck_assert_uint_eq(hash_crc16("", 0), 0);
    ck_assert_uint_eq(hash_crc32("", 0), 0);
    ck_assert_uint_eq(hash_murmur("", 0), 0);   /* seed 0xdeadbeef * 0 */
    ck_assert_uint_eq(hash_jenkins("", 0), 0xdeadbeefu + 13);
}
END_TEST

/* Keys whose length crosses every block/tail boundary hash identically from any alignment. */
START_TEST(test_alignment_independent)
{
    char buf[80], *shifted = buf + 3;
    char ref[64];
    for (size_t i = 0; i < sizeof(ref); i++)
        ref[i] = (char)(0x41 + i * 7);
    memcpy(shifted, ref, sizeof(ref));
    for (unsigned t = 0; t < HASH_COUNT; t++)
        for (size_t len = 0; len <= sizeof(ref); len++)
            ck_assert(hash_compute((enum hash_type)t, 7, ref, len) ==
                      hash_compute((enum hash_type)t, 7, shifted, len));
}
END_TEST

START_TEST(test_names_round_trip)
{
    for (unsigned t = 0; t < HASH_COUNT; t++) {
        enum hash_type out;
        const char *n = hash_name((enum hash_type)t);
        ck_assert_ptr_nonnull(n);
        ck_assert_int_eq(hash_from_name(n, strlen(n), &out), 0);
        ck_assert_int_eq(out, (int)t);
    }
    enum hash_type out;
    ck_assert_int_eq(hash_from_name(S("fnv1a"), &out), -1);
    ck_assert_ptr_null(hash_name(HASH_COUNT));
}
END_TEST

static Suite *hash_suite(void)
{
    Suite *s = suite_create("hash");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_twemproxy_apple);
    tcase_add_test(tc, test_crc_published);
    tcase_add_test(tc, test_fnv_published);
    tcase_add_test(tc, test_md5_rfc1321);
    tcase_add_test(tc, test_lookup3_published);
    tcase_add_test(tc, test_one_at_a_time_published);
    tcase_add_test(tc, test_xxh_published);
    tcase_add_test(tc, test_murmur3_published);
    tcase_add_test(tc, test_signed_char_bytes);
    tcase_add_test(tc, test_empty_key);
    tcase_add_test(tc, test_alignment_independent);
    tcase_add_test(tc, test_names_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(hash_suite)
