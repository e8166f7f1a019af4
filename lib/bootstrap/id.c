/*
 * The unique id and the other fixed wire layouts of the bootstrap.
 *
 * Id layout (128 bytes, big-endian):
 *   [0, 4)    "CHID" magic          [4]       version (1)
 *   [5]       family (4 or 6)       [6, 8)    root port
 *   [8, 24)   root address          [24, 40)  secret
 *   [40, 48)  communicator id       [48, 52)  IPv6 scope id
 *   [52, 128) zero
 * The zero tail is checked, so that a truncated or corrupted id is refused instead of
 * sending ranks to a wrong address.
 */
#include "bootstrap/bs_internal.h"

#include "util/status.h"

#include <netinet/in.h>
#include <string.h>

#define ID_MAGIC "CHID"
#define ID_VERSION 1
#define ID_USED_BYTES 52

void chorus__bs_pack_addr(const struct sockaddr_storage *addr, uint8_t out[CHORUS_BS_ADDR_BYTES])
{
    memset(out, 0, CHORUS_BS_ADDR_BYTES);
    if (addr->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        out[0] = 4;
        memcpy(out + 2, &in->sin_port, 2); /* already big-endian */
        memcpy(out + 4, &in->sin_addr, 4);
    } else if (addr->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        out[0] = 6;
        memcpy(out + 2, &in6->sin6_port, 2);
        memcpy(out + 4, &in6->sin6_addr, 16);
        chorus__bs_put32(out + 20, in6->sin6_scope_id);
    }
}

chorus_status_t chorus__bs_unpack_addr(const uint8_t in[CHORUS_BS_ADDR_BYTES],
                                       struct sockaddr_storage *addr_p)
{
    static const uint8_t zero[16];
    struct sockaddr_storage addr;

    memset(&addr, 0, sizeof(addr));
    if (in[1] != 0) goto err_bad;
    if (in[0] == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&addr;
        if (memcmp(in + 8, zero, 16) != 0) goto err_bad;
        sin->sin_family = AF_INET;
        memcpy(&sin->sin_port, in + 2, 2);
        memcpy(&sin->sin_addr, in + 4, 4);
    } else if (in[0] == 6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&addr;
        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_port, in + 2, 2);
        memcpy(&sin6->sin6_addr, in + 4, 16);
        sin6->sin6_scope_id = chorus__bs_get32(in + 20);
    } else {
        goto err_bad;
    }
    *addr_p = addr;
    return CHORUS_SUCCESS;

err_bad:
    return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "bootstrap: malformed packed address");
}

void chorus__bs_hello_pack(const chorus_bs_hello_t *h, uint8_t out[CHORUS_BS_HELLO_BYTES])
{
    chorus__bs_put32(out, h->purpose);
    chorus__bs_put64(out + 4, h->comm_id);
    chorus__bs_put32(out + 12, h->rank);
    chorus__bs_put32(out + 16, h->nranks);
    chorus__bs_pack_addr(&h->addr, out + 20);
}

chorus_status_t chorus__bs_hello_unpack(const uint8_t *in, size_t len, chorus_bs_hello_t *h_p)
{
    chorus_bs_hello_t h;

    if (len != CHORUS_BS_HELLO_BYTES) {
        return chorus__error(CHORUS_ERR_REMOTE, "bootstrap: hello of %zu bytes, expected %d", len,
                             CHORUS_BS_HELLO_BYTES);
    }
    memset(&h, 0, sizeof(h));
    h.purpose = chorus__bs_get32(in);
    h.comm_id = chorus__bs_get64(in + 4);
    h.rank = chorus__bs_get32(in + 12);
    h.nranks = chorus__bs_get32(in + 16);
    /* The ring hello carries no address; only the root's needs one. */
    if (in[20] != 0 && chorus__bs_unpack_addr(in + 20, &h.addr) != CHORUS_SUCCESS) {
        return chorus__error(CHORUS_ERR_REMOTE, "bootstrap: hello with a malformed address");
    }
    *h_p = h;
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__id_encode(const chorus_id_info_t *info, chorus_unique_id_t *id)
{
    uint8_t *p = (uint8_t *)id->internal;
    uint8_t packed[CHORUS_BS_ADDR_BYTES];

    if (info->root_addr.ss_family != AF_INET && info->root_addr.ss_family != AF_INET6) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "bootstrap: id with no IP address");
    }
    chorus__bs_pack_addr(&info->root_addr, packed);
    memset(id, 0, sizeof(*id));
    memcpy(p, ID_MAGIC, 4);
    p[4] = ID_VERSION;
    p[5] = packed[0];
    memcpy(p + 6, packed + 2, 2);
    memcpy(p + 8, packed + 4, 16);
    memcpy(p + 24, info->secret, CHORUS_SECRET_BYTES);
    chorus__bs_put64(p + 40, info->comm_id);
    memcpy(p + 48, packed + 20, 4);
    return CHORUS_SUCCESS;
}

chorus_status_t chorus__id_decode(const chorus_unique_id_t *id, chorus_id_info_t *info_p)
{
    const uint8_t *p = (const uint8_t *)id->internal;
    uint8_t packed[CHORUS_BS_ADDR_BYTES];
    chorus_id_info_t info;
    size_t i;

    if (memcmp(p, ID_MAGIC, 4) != 0) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: not a Chorus unique id (bad magic)");
    }
    if (p[4] != ID_VERSION) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: unique id version %u, this library reads %d", p[4],
                             ID_VERSION);
    }
    for (i = ID_USED_BYTES; i < CHORUS_UNIQUE_ID_BYTES; i++) {
        if (p[i] != 0) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "bootstrap: corrupted unique id (byte %zu)", i);
        }
    }
    memset(packed, 0, sizeof(packed));
    packed[0] = p[5];
    memcpy(packed + 2, p + 6, 2);
    memcpy(packed + 4, p + 8, 16);
    memcpy(packed + 20, p + 48, 4);
    memset(&info, 0, sizeof(info));
    if (chorus__bs_unpack_addr(packed, &info.root_addr) != CHORUS_SUCCESS ||
        chorus__bs_get16(p + 6) == 0 || (p[5] == 4 && chorus__bs_get32(p + 48) != 0)) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: corrupted unique id (root address)");
    }
    memcpy(info.secret, p + 24, CHORUS_SECRET_BYTES);
    info.comm_id = chorus__bs_get64(p + 40);
    *info_p = info;
    return CHORUS_SUCCESS;
}

void chorus__id_to_hex(const chorus_unique_id_t *id, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = (const uint8_t *)id->internal;
    int i;

    for (i = 0; i < CHORUS_UNIQUE_ID_BYTES; i++) {
        hex[2 * i] = digits[p[i] >> 4];
        hex[2 * i + 1] = digits[p[i] & 15];
    }
    hex[2 * CHORUS_UNIQUE_ID_BYTES] = '\0';
}

static int id_hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

chorus_status_t chorus__id_from_hex(const char *hex, chorus_unique_id_t *id_p)
{
    chorus_unique_id_t id;
    chorus_id_info_t info;
    size_t len;
    int i;

    if (hex == NULL) return chorus__error(CHORUS_ERR_INVALID_ARGUMENT, "bootstrap: no hex id");
    len = strlen(hex);
    /* A trailing newline is what a shell or a file leaves behind; nothing else is. */
    while (len > 0 && (hex[len - 1] == '\n' || hex[len - 1] == '\r' || hex[len - 1] == ' ')) {
        len--;
    }
    if (len != 2 * CHORUS_UNIQUE_ID_BYTES) {
        return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                             "bootstrap: hex id of %zu digits, expected %d", len,
                             2 * CHORUS_UNIQUE_ID_BYTES);
    }
    for (i = 0; i < CHORUS_UNIQUE_ID_BYTES; i++) {
        int hi = id_hex_digit(hex[2 * i]), lo = id_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return chorus__error(CHORUS_ERR_INVALID_ARGUMENT,
                                 "bootstrap: hex id has a non-hex character at %d", 2 * i);
        }
        id.internal[i] = (char)((hi << 4) | lo);
    }
    if (chorus__id_decode(&id, &info) != CHORUS_SUCCESS) {
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    *id_p = id;
    return CHORUS_SUCCESS;
}
