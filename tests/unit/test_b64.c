/* tests/unit/test_b64.c - unit tests of the modules' shared base64
 * (modules/common/b64.c), which serves etcd's keys and values and the
 * kubeconfig's *-data fields: round trips of every length and byte, the
 * padding, the URL-safe alphabet and line breaks (kubeconfig data), and
 * refusal of anything else. */
#include "cunit_main.h"
#include "b64.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void decode_is(const char *in, const char *want, size_t want_len)
{
	char *out = NULL;
	size_t len = 0;
	CU_ASSERT_EQUAL_FATAL(mod_b64_decode(in, &out, &len), 0);
	CU_ASSERT_EQUAL(len, want_len);
	CU_ASSERT_EQUAL(memcmp(out, want, want_len), 0);
	CU_ASSERT_EQUAL(out[len], '\0');
	free(out);
}

static void test_known_vectors(void)
{
	/* RFC 4648, section 10 */
	static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		char *e = mod_b64_encode(plain[i], strlen(plain[i]));
		CU_ASSERT_STRING_EQUAL(e, coded[i]);
		free(e);
		decode_is(coded[i], plain[i], strlen(plain[i]));
	}
}

static void test_round_trip_every_byte(void)
{
	unsigned char data[256];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(255 - i);
	for (size_t n = 0; n <= sizeof(data); n++) {
		char *e = mod_b64_encode(data, n);
		CU_ASSERT_PTR_NOT_NULL_FATAL(e);
		CU_ASSERT_EQUAL(strlen(e), 4 * ((n + 2) / 3));
		decode_is(e, (const char *)data, n);
		free(e);
	}
}

static void test_kubeconfig_forms(void)
{
	decode_is("Zm9v\nYmFy\r\n", "foobar", 6);  /* line breaks */
	decode_is("  Zm9vYg", "foob", 4);          /* no padding, blanks */
	decode_is("-_-_", "\xfb\xff\xbf", 3);       /* URL-safe alphabet */
	decode_is("+/+/", "\xfb\xff\xbf", 3);
}

static void test_refuses_other_bytes(void)
{
	static const char *const bad[] = {"Zm9v!", "Zm9v.YmFy", "Zm9v\x01", "\xc3\xa9"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *out = (char *)"untouched";
		size_t len = 7;
		CU_ASSERT_EQUAL(mod_b64_decode(bad[i], &out, &len), -EINVAL);
		CU_ASSERT_STRING_EQUAL(out, "untouched");
		CU_ASSERT_EQUAL(len, 7);
	}
}

FIBRIL_TEST_MAIN("b64", NULL, NULL, FIBRIL_TEST(test_known_vectors),
		 FIBRIL_TEST(test_round_trip_every_byte), FIBRIL_TEST(test_kubeconfig_forms),
		 FIBRIL_TEST(test_refuses_other_bytes))
