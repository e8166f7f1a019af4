/*
 * The bootstrap's fixed layouts read from outside (lib/bootstrap/id.c): the unique id
 * (chorus__id_decode: it comes from the user, a file or CHORUS_UNIQUE_ID), its hex form
 * (chorus__id_from_hex, the CHORUS_UNIQUE_ID path), and a rank's hello
 * (chorus__bs_hello_unpack, read off the wire). The first byte picks which; the rest is
 * the input. Whatever a parser accepts must encode back to exactly the same bytes, so no
 * field is read loosely and no garbage passes through.
 */
#include "fuzz_common.h"

#include "bootstrap/bootstrap.h"
#include "bootstrap/bs_internal.h"

#include <ctype.h>
#include <string.h>

static void fuzz_decode(const unsigned char *data, size_t size)
{
    chorus_unique_id_t id, again;
    chorus_id_info_t info;

    memset(&id, 0, sizeof(id));
    memcpy(id.internal, data, size < sizeof(id) ? size : sizeof(id));
    if (chorus__id_decode(&id, &info) != CHORUS_SUCCESS) return;
    FUZZ_CHECK(info.root_addr.ss_family == AF_INET || info.root_addr.ss_family == AF_INET6);
    FUZZ_CHECK(chorus__id_encode(&info, &again) == CHORUS_SUCCESS);
    FUZZ_CHECK(memcmp(&id, &again, sizeof(id)) == 0);
}

static void fuzz_hex(const unsigned char *data, size_t size)
{
    char *text = malloc(size + 1), hex[2 * CHORUS_UNIQUE_ID_BYTES + 1];
    chorus_unique_id_t id;
    size_t i, n = 2 * CHORUS_UNIQUE_ID_BYTES;

    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    if (chorus__id_from_hex(text, &id) == CHORUS_SUCCESS) {
        chorus__id_to_hex(&id, hex);
        FUZZ_CHECK(strlen(text) >= n);
        for (i = 0; i < n; i++) FUZZ_CHECK(tolower((unsigned char)text[i]) == hex[i]);
        for (i = n; text[i] != '\0'; i++)
            FUZZ_CHECK(text[i] == '\n' || text[i] == '\r' || text[i] == ' ');
    }
    free(text);
}

static void fuzz_hello(const unsigned char *data, size_t size)
{
    uint8_t *in = malloc(size > 0 ? size : 1), out[CHORUS_BS_HELLO_BYTES];
    chorus_bs_hello_t h;

    FUZZ_CHECK(in != NULL);
    memcpy(in, data, size); /* a block of exactly size bytes: reads past it are caught */
    if (chorus__bs_hello_unpack(in, size, &h) == CHORUS_SUCCESS) {
        FUZZ_CHECK(size == CHORUS_BS_HELLO_BYTES);
        chorus__bs_hello_pack(&h, out);
        /* A zero family means "no address": the packer writes zeros there. */
        FUZZ_CHECK(memcmp(out, in, in[20] != 0 ? sizeof(out) : 20) == 0);
    }
    free(in);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: fuzz_decode(data + 1, size - 1); break;
    case 1: fuzz_hex(data + 1, size - 1); break;
    default: fuzz_hello(data + 1, size - 1); break;
    }
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("CHORUS_DEBUG");
    return 0;
}
