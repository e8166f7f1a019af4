/*
 * Small parsers of environment strings: chorus__parse_size (lib/util/config.c: every size
 * variable, "64M", "1GiB"-like text) and chorus__sock_parse_addr (lib/util/sock.c:
 * CHORUS_ROOT, MASTER_ADDR:MASTER_PORT). The first byte picks which, the rest is the text.
 * Host names never reach DNS here: tests/fuzz/no_dns.c makes every lookup numeric.
 * Invariants: parse_size accepts exactly digits, an optional k/m/g/t (then an optional b),
 * with the value an independent reading gives; an address parsed is IPv4 or IPv6 with the
 * port the text names.
 *
 * Found here: chorus__parse_size let strtoull skip blanks and take a sign, so " -5" read as
 * 2^64 - 5 bytes and "\r6kb" as 6 KiB (corpus/parse/regress-size-*); a size must now start
 * with a digit.
 */
#include "fuzz_common.h"

#include "util/config.h"
#include "util/sock.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <string.h>

/* The grammar of the size variables, read independently of config.c. */
static int reference_size(const char *s, uint64_t *v_p)
{
    uint64_t v = 0;
    unsigned shift = 0;

    if (!isdigit((unsigned char)*s)) return -1;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    switch (tolower((unsigned char)*s)) {
    case 'k': shift = 10; s++; break;
    case 'm': shift = 20; s++; break;
    case 'g': shift = 30; s++; break;
    case 't': shift = 40; s++; break;
    default: break;
    }
    /* "B" only after a unit ("64KB"): config.c takes a bare number as bytes already. */
    if (shift > 0 && (*s == 'b' || *s == 'B')) s++;
    if (*s != '\0' || (shift > 0 && v > (UINT64_MAX >> shift))) return -1;
    *v_p = v << shift;
    return 0;
}

static void fuzz_size(const char *text)
{
    uint64_t got = 0, want = 0;
    int rc = chorus__parse_size(text, &got), ref = reference_size(text, &want);

    FUZZ_CHECK(rc == ref);
    if (rc == 0) FUZZ_CHECK(got == want);
}

static void fuzz_addr(const char *text)
{
    struct sockaddr_storage addr;
    const char *colon = strrchr(text, ':');
    uint16_t port;

    if (chorus__sock_parse_addr(text, &addr) != CHORUS_SUCCESS) return;
    FUZZ_CHECK(colon != NULL);
    if (addr.ss_family == AF_INET) {
        port = ntohs(((struct sockaddr_in *)&addr)->sin_port);
    } else {
        FUZZ_CHECK(addr.ss_family == AF_INET6);
        port = ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
    }
    FUZZ_CHECK(port == (uint16_t)strtol(colon + 1, NULL, 10));
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *text;

    if (size < 1) return 0;
    text = malloc(size);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (data[0] & 1) {
        fuzz_addr(text);
    } else {
        fuzz_size(text);
    }
    free(text);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("CHORUS_DEBUG");
    return 0;
}
